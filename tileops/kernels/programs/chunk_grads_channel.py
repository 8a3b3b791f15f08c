"""GLA's chunked backward, every chunk at once: dq, dk, dv and dg from the forward's states h,
the walk's state gradients (``chunk_dh_channel``) and the first pass's M and K_s.

With γ the log decays summed down the chunk (per key channel), Γ its last row, S_c = h[c] the
state entering the chunk, dS_{c+1} the gradient of the one leaving it and dA = scale dO Vᵀ (s ≤ t):

    dv = Mᵀ dO + K_s dS_{c+1}
    dk = e^{Γ − γ} ⊙ (V dS_{c+1}ᵀ) + Σ_{t ≥ s} dA_ts q_t ⊙ e^{γ_t − γ_s}
    dq = scale e^γ ⊙ (dO S_cᵀ) + Σ_{s ≤ t} dA_ts k_s ⊙ e^{γ_t − γ_s}
    dg = the sum of q ⊙ dq − k ⊙ dk from each row to the chunk's last, plus Σ_v S_{c+1} ⊙ dS_{c+1}

(the last term is the sum beyond the chunk: the gradient of the next chunk's first log decay). In
bf16 with V = K, where every channel's γ spans at most 2^{±FOLD_REACH} about its midpoint ρ over
the chunk, each gated sum is one fold, as the first pass's products are: dk = e^{ρ − γ} ⊙ (dAᵀ (Q ⊙
e^{γ − ρ})) and dq's mirror, the operand in two bf16 parts, two tensor-core products
(docs/kda-gated-products.md). Elsewhere they go by 16-row blocks as the forward's did: a block
meets the rows after it (dk) or before it (dq) through one tensor-core product about its last or
first row, every factor at most 1; inside a block a thread per key channel and block forms the
pairs one by one in fp32. The products' operand is carried from block to block in fp32: the rows
already in take the decay between the two blocks' reference rows (one factor a channel), the next
block's rows join with their own, so that each row's factor is formed once and not once a block.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.blocks.transforms import LOG_DECAY_FLOOR
from tileops.kernels.blocks.window_fold import FOLD_REACH
from tileops.kernels.blocks.wy_merge import BLOCK
from tileops.kernels.hardware import WARPGROUP
from tileops.kernels.blocks.channel_cumsum import LOG2_E  # γ in base 2, as the first pass keeps it


def grads_channel_program(*, heads: int, dim_k: int, dim_v: int, chunk: int, dtype: str, scale: float):
    """The TileLang program: q, k [tokens, H, K], v, do [tokens, H, V] in the token dtype, g [tokens,
    H, K] in fp32, the first pass's ``m`` [H, tokens, C] and ``ks`` [H, tokens, K], the forward's
    ``h`` [B, NT + 1, H, K, V] in fp32 and the walk's ``dh`` [B, NT, H, K, V] in the token dtype,
    ``has_init`` (else the first chunk starts from zeros, whatever h[:, 0] holds), then dq, dk [tokens, H, K] and dv
    [tokens, H, V] in the token dtype and dg [tokens, H, K] in fp32. Sequences of NT whole chunks.
    Grid: (NT, H, B), a thread per key channel and 16-row block each (four warpgroups at K = 128):
    the pair loops and the gated operands wait on latency, which the more warps hide (one CTA an SM
    whatever the count: shared memory; docs/benchmarks.md)."""
    H, K, V, C = heads, dim_k, dim_v, chunk
    assert C == 4 * BLOCK and K <= WARPGROUP
    accum = "float32"
    tokens, batch, chunks, states = T.dynamic("tokens"), T.dynamic("batch"), T.dynamic("chunks"), T.dynamic("states")

    threads = C // BLOCK * K
    fold = dtype == "bfloat16" and V == K  # the fold's low parts take V's tile, free once dk's state term is in

    @T.macro
    def block_pairs(da_s, x_s, gam_s, pair_s, tx, later: bool):
        """The pairs inside each 16-row block, a thread per key channel and block, the lower
        triangle only, every exponent at most 0: Σ_{t ≥ s} dA_ts x_t e^{γ_t − γ_s} into row s of
        ``pair_s`` (``later``, for dk; x = q) or Σ_{s ≤ t} dA_ts x_s e^{γ_t − γ_s} into row t (for
        dq; x = k). dA is read at one address a warp (a broadcast)."""
        c = tx % K
        g_l = T.alloc_local([BLOCK], accum)
        x_l = T.alloc_local([BLOCK], accum)
        acc_l = T.alloc_local([BLOCK], accum)
        r = tx // K * BLOCK
        for u in T.unroll(BLOCK, explicit=True):
            g_l[u] = gam_s[r + u, c]
            x_l[u] = T.cast(x_s[r + u, c], accum)
            acc_l[u] = 0.0
        for t in T.unroll(BLOCK, explicit=True):
            for u in T.unroll(BLOCK, explicit=True):
                if u <= t:  # constants once unrolled: only the triangle is emitted
                    f = T.cast(da_s[r + t, r + u], accum) * T.exp2(g_l[t] - g_l[u])
                    if later:
                        acc_l[u] = acc_l[u] + f * x_l[t]
                    else:
                        acc_l[t] = acc_l[t] + f * x_l[u]
        for u in T.unroll(BLOCK, explicit=True):
            pair_s[r + u, c] = acc_l[u]

    @T.macro
    def folded_sum(da_s, x_s, gam_s, rho_s, hi_s, lo_s, acc_f, tmp_f, opf_f, later: bool):
        """The chunk's gated sum in one fold about each channel's midpoint ρ, onto ``acc_f``: with
        ``later`` (dk) e^{ρ − γ_s} ⊙ (dAᵀ (q ⊙ e^{γ − ρ})), else (dq) e^{γ_t − ρ} ⊙ (dA (k ⊙ e^{ρ − γ})),
        the operand in two bf16 parts, its rounding in ``hi_s`` and the rest's in ``lo_s``. Every
        factor is within 2^{±FOLD_REACH}; the zeros of dA above its diagonal drop the pairs whose
        factors exceed 1."""
        for t, j in T.Parallel(C, K):
            e = gam_s[t, j] - rho_s[j]
            opf_f[t, j] = T.cast(x_s[t, j], accum) * T.exp2(e if later else -e)
        for t, j in T.Parallel(C, K):
            hi_s[t, j] = T.cast(opf_f[t, j], dtype)
            lo_s[t, j] = T.cast(opf_f[t, j] - T.cast(T.cast(opf_f[t, j], dtype), accum), dtype)
        T.gemm(da_s, hi_s, tmp_f, transpose_A=later, clear_accum=True)
        T.gemm(da_s, lo_s, tmp_f, transpose_A=later)
        for s, j in T.Parallel(C, K):
            e = rho_s[j] - gam_s[s, j]
            acc_f[s, j] = acc_f[s, j] + tmp_f[s, j] * T.exp2(e if later else -e)

    @T.prim_func
    def chunk_grads_channel(
        q: T.Tensor([tokens, H, K], dtype),
        k: T.Tensor([tokens, H, K], dtype),
        v: T.Tensor([tokens, H, V], dtype),
        do: T.Tensor([tokens, H, V], dtype),
        g: T.Tensor([tokens, H, K], accum),
        m: T.Tensor([H, tokens, C], dtype),
        ks: T.Tensor([H, tokens, K], dtype),
        h: T.Tensor([batch, states, H, K, V], accum),
        dh: T.Tensor([batch, chunks, H, K, V], dtype),
        has_init: T.int32,
        dq: T.Tensor([tokens, H, K], dtype),
        dk: T.Tensor([tokens, H, K], dtype),
        dv: T.Tensor([tokens, H, V], dtype),
        dg: T.Tensor([tokens, H, K], accum),
    ):
        with T.Kernel(chunks, H, batch, threads=threads) as (c, hh, b):
            t0 = (b * chunks + c) * C
            q_s = T.alloc_shared([C, K], dtype)
            k_s = T.alloc_shared([C, K], dtype)
            v_s = T.alloc_shared([C, V], dtype)
            do_s = T.alloc_shared([C, V], dtype)
            m_s = T.alloc_shared([C, C], dtype)
            da_s = T.alloc_shared([C, C], dtype)
            st_s = T.alloc_shared([K, V], dtype)  # dS_{c+1}, then S_c: the products' operand
            op_s = T.alloc_shared([C, K], dtype)  # K_s, then each block's gated operand
            gam_s = T.alloc_shared([C, K], accum)
            dgp_s = T.alloc_shared([C, K], accum)  # −k ⊙ dk
            pair_s = T.alloc_shared([C, K], accum)  # the pairs inside the blocks, of dk then of dq; then q ⊙ dq
            past_s = T.alloc_shared([K], accum)
            rho_s = T.alloc_shared([K], accum)
            fit_s = T.alloc_shared([1], "int32")
            g_f = T.alloc_fragment([C, K], accum)
            a_f = T.alloc_fragment([C, C], accum)
            dv_f = T.alloc_fragment([C, V], accum)
            acc_f = T.alloc_fragment([C, K], accum)
            tmp_f = T.alloc_fragment([C, K], accum)
            opf_f = T.alloc_fragment([C, K], accum)  # a block's gated operand in fp32, carried to the next
            s_f = T.alloc_fragment([K, V], accum)
            past_f = T.alloc_fragment([K], accum)
            run = T.alloc_var(accum)
            col_l = T.alloc_local([C], accum)  # one channel's column, for the sums down the chunk
            tx = T.get_thread_binding()

            T.copy(q[t0:t0 + C, hh, :], q_s)
            T.copy(k[t0:t0 + C, hh, :], k_s)
            T.copy(v[t0:t0 + C, hh, :], v_s)
            T.copy(do[t0:t0 + C, hh, :], do_s)
            T.copy(m[hh, t0:t0 + C, :], m_s)
            T.copy(ks[hh, t0:t0 + C, :], op_s)
            T.copy(g[t0:t0 + C, hh, :], g_f)
            for i, j in T.Parallel(C, K):
                gam_s[i, j] = T.max(g_f[i, j], LOG_DECAY_FLOOR) * LOG2_E
            if tx == 0:
                fit_s[0] = 1
            if tx < K:  # γ: each channel's running sum down the chunk, unrolled (its loads issued ahead)
                run = 0.0
                for i in T.unroll(C, explicit=True):
                    run = run + gam_s[i, tx]
                    gam_s[i, tx] = run
                rho_s[tx] = (gam_s[0, tx] + run) * 0.5  # γ falls down the chunk: its midpoint
                if gam_s[0, tx] - run > 2 * FOLD_REACH:
                    fit_s[0] = 0
            # S_{c+1} and dS_{c+1} (the products' operand as it stands), loaded in one go; dg's term past the chunk.
            T.copy(h[b, c + 1, hh, :, :], s_f)
            T.copy(dh[b, c, hh, :, :], st_s)
            for i, j in T.Parallel(K, V):
                s_f[i, j] = s_f[i, j] * T.cast(st_s[i, j], accum)
            T.reduce_sum(s_f, past_f, dim=1)
            T.copy(past_f, past_s)

            T.gemm(do_s, v_s, a_f, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(C, C):
                da_s[i, j] = T.if_then_else(j <= i, scale * a_f[i, j], 0.0)
            T.gemm(m_s, do_s, dv_f, transpose_A=True, clear_accum=True)
            T.gemm(op_s, st_s, dv_f)
            T.copy(dv_f, dv[t0:t0 + C, hh, :])

            # dk: the state's term, then the pairs over the whole chunk in one fold where the decays
            # allow it, else the pairs inside each block and each block against the rows after it.
            T.gemm(v_s, st_s, acc_f, transpose_B=True, clear_accum=True)
            if fold and fit_s[0] == 1:
                for i, j in T.Parallel(C, K):
                    acc_f[i, j] = acc_f[i, j] * T.exp2(gam_s[C - 1, j] - gam_s[i, j])
                folded_sum(da_s, q_s, gam_s, rho_s, op_s, v_s, acc_f, tmp_f, opf_f, True)
            else:
                block_pairs(da_s, q_s, gam_s, pair_s, tx, True)
                for i, j in T.Parallel(C, K):
                    acc_f[i, j] = acc_f[i, j] * T.exp2(gam_s[C - 1, j] - gam_s[i, j]) + pair_s[i, j]
                T.clear(opf_f)
                for step in range(C // BLOCK - 1):  # from the last block but one: the rows after it join a block at a time
                    blk = C // BLOCK - 2 - step
                    e = blk * BLOCK + BLOCK - 1
                    for t, j in T.Parallel(C, K):
                        if t // BLOCK == blk + 1:
                            opf_f[t, j] = T.cast(q_s[t, j], accum) * T.exp2(gam_s[t, j] - gam_s[e, j])
                        else:
                            opf_f[t, j] = opf_f[t, j] * T.exp2(gam_s[e + BLOCK, j] - gam_s[e, j])
                    for t, j in T.Parallel(C, K):
                        op_s[t, j] = T.cast(opf_f[t, j], dtype)
                    T.gemm(da_s, op_s, tmp_f, transpose_A=True, clear_accum=True)
                    for s, j in T.Parallel(C, K):
                        if s // BLOCK == blk:
                            acc_f[s, j] = acc_f[s, j] + tmp_f[s, j] * T.exp2(gam_s[e, j] - gam_s[s, j])
            T.copy(acc_f, dk[t0:t0 + C, hh, :])
            for i, j in T.Parallel(C, K):
                dgp_s[i, j] = -T.cast(k_s[i, j], accum) * acc_f[i, j]

            # dq: the state's term, then the pairs over the whole chunk in one fold where the decays
            # allow it, else the pairs inside each block and each block against the rows before it.
            for i, j in T.Parallel(K, V):
                st_s[i, j] = T.cast(T.if_then_else(c > 0 or has_init > 0, h[b, c, hh, i, j], 0.0), dtype)
            T.gemm(do_s, st_s, acc_f, transpose_B=True, clear_accum=True)
            if fold and fit_s[0] == 1:
                for i, j in T.Parallel(C, K):
                    acc_f[i, j] = scale * T.exp2(gam_s[i, j]) * acc_f[i, j]
                folded_sum(da_s, k_s, gam_s, rho_s, op_s, v_s, acc_f, tmp_f, opf_f, False)
            else:
                block_pairs(da_s, k_s, gam_s, pair_s, tx, False)
                for i, j in T.Parallel(C, K):
                    acc_f[i, j] = scale * T.exp2(gam_s[i, j]) * acc_f[i, j] + pair_s[i, j]
                T.clear(opf_f)
                for blk in range(1, C // BLOCK):  # from the second block: the rows before it join a block at a time
                    r = blk * BLOCK
                    for s, j in T.Parallel(C, K):
                        if s // BLOCK == blk - 1:
                            opf_f[s, j] = T.cast(k_s[s, j], accum) * T.exp2(gam_s[r, j] - gam_s[s, j])
                        else:
                            opf_f[s, j] = opf_f[s, j] * T.exp2(gam_s[r, j] - gam_s[r - BLOCK, j])
                    for t, j in T.Parallel(C, K):
                        op_s[t, j] = T.cast(opf_f[t, j], dtype)
                    T.gemm(da_s, op_s, tmp_f, clear_accum=True)
                    for t, j in T.Parallel(C, K):
                        if t // BLOCK == blk:
                            acc_f[t, j] = acc_f[t, j] + tmp_f[t, j] * T.exp2(gam_s[t, j] - gam_s[r, j])
            T.copy(acc_f, dq[t0:t0 + C, hh, :])
            for i, j in T.Parallel(C, K):  # q ⊙ dq apart: added in place, each row took a barrier
                pair_s[i, j] = T.cast(q_s[i, j], accum) * acc_f[i, j]

            if tx < K:  # dg: the sum from each row to the chunk's last, plus the term past the chunk
                for u in T.unroll(C, explicit=True):
                    col_l[u] = dgp_s[u, tx] + pair_s[u, tx]
                run = past_s[tx]
                for u in T.unroll(C, explicit=True):
                    run = run + col_l[C - 1 - u]
                    dg[t0 + C - 1 - u, hh, tx] = run

    return chunk_grads_channel

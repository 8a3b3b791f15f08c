"""Second pass of the GDN prefill: the sequential state chain and the outputs, chunk by chunk.

One CTA per (V tile, value head, sequence) walks the C-token windows that its sequence touches,
in order, with the state tile S (K × block_v, fp32) in registers; rows of a window outside the
sequence are masked. Per chunk, with T' and γ (from the sequence's start inside the window)
from the first pass:

    X = V - diag(e^γ) K S            (row i: v_i minus the decayed state read by k_i)
    Δ = T' X                         (the chunk's δ's: U - W S without forming W or U)
    O = diag(scale·e^γ) Q S + (L ⊙ scale·Q Kᵀ ⊙ e^{γ_i-γ_j}) Δ
    S = e^{γ_C} S + (diag(e^{γ_C-γ}) K)ᵀ Δ

The L2 norms of q and k, when asked, are per-row factors applied to the products, so the inputs
are used as loaded. Columns of V never interact, so V tiles multiply the CTAs of the chain.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures


def chain_program(*, heads: int, value_heads: int, dim_k: int, dim_v: int, chunk: int,
                  block_v: int, dtype: str, varlen: bool, l2norm: bool, scale: float,
                  state_v_first: bool, threads: int, num_stages: int, min_blocks: int = 1):
    """The TileLang program of the state pass, specialised on everything but lengths and counts.

    Tokens are flattened to [B·T]. Fixed length: ``seq_len`` gives T. Varlen: ``cu_seqlens``
    (int32, [N+1]) bounds the sequences. ``has_init`` (0 or 1) says whether ``h0`` holds an
    initial state; without one, pass any tensor of the state's shape (it is not read).
    Grid: (V / block_v, HV, N); ``min_blocks`` CTAs are asked to share an SM.
    """
    H, HV, K, V, C, BV = heads, value_heads, dim_k, dim_v, chunk, block_v
    group = HV // H
    accum = "float32"
    tokens = T.dynamic("tokens")
    nseq = T.dynamic("nseq")
    state_shape = [nseq, HV, V, K] if state_v_first else [nseq, HV, K, V]

    @T.macro
    def load_state(h0, s_f, n, hv, v0, has_init):
        if state_v_first:
            for i, j in T.Parallel(K, BV):
                s_f[i, j] = T.if_then_else(has_init != 0, h0[n, hv, v0 + j, i], 0.0)
        else:
            for i, j in T.Parallel(K, BV):
                s_f[i, j] = T.if_then_else(has_init != 0, h0[n, hv, i, v0 + j], 0.0)

    @T.macro
    def store_state(ht, s_f, n, hv, v0):
        if state_v_first:
            for i, j in T.Parallel(K, BV):
                ht[n, hv, v0 + j, i] = s_f[i, j]
        else:
            T.copy(s_f, ht[n, hv, :, v0:v0 + BV])

    @T.macro
    def row_rnorm(src_s, dst_s):
        sq_f = T.alloc_fragment([C, K], accum)
        ss_f = T.alloc_fragment([C], accum)
        T.copy(src_s, sq_f)
        for i, j in T.Parallel(C, K):
            sq_f[i, j] = sq_f[i, j] * sq_f[i, j]
        T.reduce_sum(sq_f, ss_f, dim=1)
        for i in T.Parallel(C):
            dst_s[i] = T.rsqrt(ss_f[i] + 1e-6)

    @T.macro
    def run_chain(q, k, v, tp, gam, h0, o, ht, n, hv, bv, bos, eos, has_init):
        h = hv // group
        v0 = bv * BV
        q_s = T.alloc_shared([C, K], dtype)
        k_s = T.alloc_shared([C, K], dtype)
        v_s = T.alloc_shared([C, BV], dtype)
        tp_s = T.alloc_shared([C, C], dtype)
        gm_s = T.alloc_shared([C], accum)
        rq_s = T.alloc_shared([C], accum)
        rk_s = T.alloc_shared([C], accum)
        s_f = T.alloc_fragment([K, BV], accum)
        s_s = T.alloc_shared([K, BV], dtype)
        ks_f = T.alloc_fragment([C, BV], accum)
        x_s = T.alloc_shared([C, BV], dtype)
        d_f = T.alloc_fragment([C, BV], accum)
        d_s = T.alloc_shared([C, BV], dtype)
        qk_f = T.alloc_fragment([C, C], accum)
        m_s = T.alloc_shared([C, C], dtype)
        o_f = T.alloc_fragment([C, BV], accum)
        o_s = T.alloc_shared([C, BV], dtype)
        dk_s = T.alloc_shared([C, BV], dtype)
        fx_s = T.alloc_shared([C], accum)
        fo_s = T.alloc_shared([C], accum)
        fs_s = T.alloc_shared([C], accum)
        g_last = T.alloc_var(accum)
        if min_blocks > 1:
            T.annotate_min_blocks_per_sm(min_blocks)

        load_state(h0, s_f, n, hv, v0, has_init)
        T.copy(s_f, s_s)
        w0 = bos // C
        windows = T.if_then_else(eos > bos, T.ceildiv(eos, C) - w0, 0)
        for c in T.Pipelined(windows, num_stages=num_stages):
            t0 = (w0 + c) * C
            T.copy(q[t0:t0 + C, h, :], q_s)
            T.copy(k[t0:t0 + C, h, :], k_s)
            T.copy(v[t0:t0 + C, hv, v0:v0 + BV], v_s)
            T.copy(tp[hv, t0:t0 + C, :], tp_s)
            T.copy(gam[hv, t0:t0 + C], gm_s)
            lo = T.max(bos - t0, 0)
            hi = T.min(eos - t0, C)
            g_last = gm_s[hi - 1]
            if l2norm:
                row_rnorm(q_s, rq_s)
                row_rnorm(k_s, rk_s)
            # Per-row factors of the chunk, zero outside the sequence: the decay of the state read
            # by k_i, of the state read by q_i (with the scale), and from row i to the chunk's end.
            for i in T.Parallel(C):
                inside = lo <= i and i < hi
                if l2norm:
                    fx_s[i] = T.if_then_else(inside, T.exp(gm_s[i]) * rk_s[i], 0.0)
                    fo_s[i] = T.if_then_else(inside, T.exp(gm_s[i]) * (scale * rq_s[i]), 0.0)
                    fs_s[i] = T.if_then_else(inside, T.exp(g_last - gm_s[i]) * rk_s[i], 0.0)
                else:
                    fx_s[i] = T.if_then_else(inside, T.exp(gm_s[i]), 0.0)
                    fo_s[i] = T.if_then_else(inside, T.exp(gm_s[i]) * scale, 0.0)
                    fs_s[i] = T.if_then_else(inside, T.exp(g_last - gm_s[i]), 0.0)

            T.gemm(k_s, s_s, ks_f, clear_accum=True)
            for i, j in T.Parallel(C, BV):
                x_s[i, j] = T.if_then_else(lo <= i and i < hi, v_s[i, j] - fx_s[i] * ks_f[i, j], 0.0)
            T.gemm(tp_s, x_s, d_f, clear_accum=True)
            for i, j in T.Parallel(C, BV):
                d_s[i, j] = T.if_then_else(lo <= i and i < hi, d_f[i, j], 0.0)
                dk_s[i, j] = d_f[i, j] * fs_s[i]

            T.gemm(q_s, k_s, qk_f, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(C, C):
                if l2norm:
                    m_s[i, j] = T.if_then_else(
                        lo <= j and j <= i and i < hi,
                        qk_f[i, j] * (scale * rq_s[i] * rk_s[j]) * T.exp(gm_s[i] - gm_s[j]), 0.0)
                else:
                    m_s[i, j] = T.if_then_else(
                        lo <= j and j <= i and i < hi, qk_f[i, j] * scale * T.exp(gm_s[i] - gm_s[j]), 0.0)
            T.gemm(q_s, s_s, o_f, clear_accum=True)
            for i, j in T.Parallel(C, BV):
                o_f[i, j] = o_f[i, j] * fo_s[i]
            T.gemm(m_s, d_s, o_f)
            T.copy(o_f, o_s)
            for i, j in T.Parallel(C, BV):
                if lo <= i and i < hi:
                    o[t0 + i, hv, v0 + j] = o_s[i, j]

            for i, j in T.Parallel(K, BV):
                s_f[i, j] = s_f[i, j] * T.exp(g_last)
            T.gemm(k_s, dk_s, s_f, transpose_A=True)
            T.copy(s_f, s_s)
        store_state(ht, s_f, n, hv, v0)

    if varlen:
        @T.prim_func
        def chain(
            q: T.Tensor([tokens, H, K], dtype),
            k: T.Tensor([tokens, H, K], dtype),
            v: T.Tensor([tokens, HV, V], dtype),
            tp: T.Tensor([HV, tokens, C], dtype),
            gam: T.Tensor([HV, tokens], accum),
            h0: T.Tensor(state_shape, accum),
            cu_seqlens: T.Tensor([nseq + 1], "int32"),
            o: T.Tensor([tokens, HV, V], dtype),
            ht: T.Tensor(state_shape, accum),
            has_init: T.int32,
        ):
            with T.Kernel(V // BV, HV, nseq, threads=threads) as (bv, hv, n):
                run_chain(q, k, v, tp, gam, h0, o, ht, n, hv, bv, cu_seqlens[n], cu_seqlens[n + 1], has_init)
    else:
        @T.prim_func
        def chain(
            q: T.Tensor([tokens, H, K], dtype),
            k: T.Tensor([tokens, H, K], dtype),
            v: T.Tensor([tokens, HV, V], dtype),
            tp: T.Tensor([HV, tokens, C], dtype),
            gam: T.Tensor([HV, tokens], accum),
            h0: T.Tensor(state_shape, accum),
            o: T.Tensor([tokens, HV, V], dtype),
            ht: T.Tensor(state_shape, accum),
            seq_len: T.int32,
            has_init: T.int32,
        ):
            with T.Kernel(V // BV, HV, nseq, threads=threads) as (bv, hv, n):
                run_chain(q, k, v, tp, gam, h0, o, ht, n, hv, bv, n * seq_len, (n + 1) * seq_len, has_init)

    return chain

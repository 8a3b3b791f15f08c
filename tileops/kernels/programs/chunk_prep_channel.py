"""First pass of the prefill under one decay per key channel (KDA): per chunk, everything that
does not depend on the state.

As in ``chunk_prep``, chunks are the C-token windows of the packed token axis, cut at sequence
boundaries, one CTA per (value head, window), and γ (here one cumulative log decay per key
channel) restarts at each sequence's start. With r the L2-norm factors it writes per token row

    T' = (I + A)⁻¹ diag(β)       A_ij = β_i r_ki r_kj Σ_c k_ic k_jc e^{γ_ic − γ_jc}     (j < i)
    M_ij = scale r_qi r_kj Σ_c q_ic k_jc e^{γ_ic − γ_jc}                               (j ≤ i)
    Q_o = scale r_q q ⊙ e^γ      K_x = r_k k ⊙ e^γ      K_s = r_k k ⊙ e^{γ_end − γ}

all in the input dtype (γ_end: γ of the last row of the token's sequence in the window), and the
state's decay over each segment, e^{γ_end} per channel in fp32: row w of ``decay`` for the segment
that ends window w, row W + n for sequence n's last (W windows). The walk reads the one it needs.
Without the delta rule (GLA: no β, no A, no solve) it writes M, Q_o, K_s and the decays only.

The gated products (docs/kda-gated-products.md). Where every channel's γ spans at most
2^{±FOLD_REACH} about its midpoint ρ over the window (99–100 % of windows under weak and
Mamba-initialised gates), the whole window is one fold: X ⊙ 2^{γ − ρ} against K ⊙ 2^{ρ − γ}, each operand in two
bf16 parts, three tensor-core products; the masks drop the pairs across sequences and above the
diagonal. Elsewhere the 16-row blocks I > 0 meet the rows before them through one product each,
of K ⊙ e^{γ − γ_r} (block I's rows, r its first) and K ⊙ e^{γ_r − γ} (the rows before r), every
factor at most 1, in fp16; a factor whose row lies in another sequence than r is zero, so no pair
crosses a sequence. Inside a block the pairs take the tensor cores about the block's middle row,
each operand in two bf16 parts, or, where the decays leave that form's range, are formed one by
one in fp32 (``blocks.channel_pairs``).
"""

import functools

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.blocks.channel_pairs import SOURCE as PAIRS_SOURCE
from tileops.kernels.blocks.channel_pairs import block_pairs
from tileops.kernels.blocks.entry import Sequences, kernel_entry
from tileops.kernels.blocks.solve_tril import upper_clear, wy_solve
from tileops.kernels.blocks.channel_cumsum import MASK_WORDS, channel_cumsum, span_first, span_last
from tileops.kernels.blocks.transforms import row_rnorm
from tileops.kernels.blocks.window_fold import ROWS_A_WARP, VEC, lane_group, window_fold
from tileops.kernels.blocks.wy_merge import BLOCK, HALF_TYPES, SCRATCH_LD, SOURCE
from tileops.kernels.hardware import WARP, WARPGROUP
from tileops.kernels.plans.tiles import PAD, ROW_PAD

ROW_SKEW = 8  # elements padding each row of the q and k tiles: rows of 16-byte units, loaded, read
# and filled 16 bytes at a time, each row 4 banks on from the one before (a warp's 8 rows of one
# 16-byte unit meet no bank twice)
STORE8 = r"""
namespace tileops_gdn {
// Eight fp32 values rounded to the 16-bit type H, as one 16-byte store (dst 16-byte aligned); no
// memory clobber: the kernel reads nothing it writes, and the loads after it may pass it.
template <typename H> __device__ __forceinline__ void store8(void* dst, const float* v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(pack2<H>(v[0], v[1])),
               "r"(pack2<H>(v[2], v[3])), "r"(pack2<H>(v[4], v[5])), "r"(pack2<H>(v[6], v[7])));
}
}  // namespace tileops_gdn
"""
HALVES = 2  # warpgroups a window, two windows an SM: the pass waits on latency, which twice the
# warps hide (docs/kda-gated-products.md, "Two warpgroups a window")
THREADS = HALVES * WARPGROUP


def channel_prep_program(*, heads: int, value_heads: int, dim_k: int, chunk: int, dtype: str, sequences: str,
                         l2norm: bool, gate_in_kernel: bool, beta_sigmoid: bool, neg_eigval: bool, scale: float,
                         lower_bound=None, delta: bool = True, gate_dtype: str = "float32"):
    """The TileLang program of the first pass, specialised on everything but lengths and counts.

    Arguments: q, k, g [tokens, HV, K] (g in ``gate_dtype``, fp32 or the input dtype: a 16-bit gate
    is read as the call passes it), beta, a_log [HV], dt_bias [HV · K], then the tables of
    ``sequences`` (equal or packed: ``blocks.entry``), then the outputs ``tp`` and ``m_out``
    [HV, tokens, C], ``qo``, ``kx`` and ``ks`` [HV, tokens, K] in the input dtype and ``decay``
    [HV, W + N, K] in fp32; beta, A_log and dt_bias in fp32 (A_log and dt_bias are read with
    ``gate_in_kernel`` only; zeros stand in for an absent dt_bias). ``lower_bound``: the in-kernel
    gate's bound (``channel_gate_transform``). Without ``delta``: inputs q, k and g, outputs
    ``m_out``, ``qo``, ``ks`` and ``decay``. Grid: (HV, ceil(tokens / C)), HALVES warpgroups each:
    each forms the in-block pairs over half the channels, and the first alone runs the solve.
    """
    H, HV, K, C = heads, value_heads, dim_k, chunk
    assert C == 4 * BLOCK and K <= WARPGROUP, "four 16-row blocks a chunk; a thread per key channel"
    assert C // BLOCK * WARP == WARPGROUP, "a warp a block, each warpgroup half of the channels"
    group = HV // H
    accum, operand = "float32", "float16"
    tokens = T.dynamic("tokens")
    decay_rows = T.dynamic("decay_rows")
    seqs = Sequences(sequences, HV, with_state=False, tokens=tokens)
    nseq = seqs.nseq
    varlen = sequences == "packed"
    assert delta or not (gate_in_kernel or beta_sigmoid or neg_eigval), "without the delta rule: no β, no gate transform"
    inputs = [("q", T.Tensor([tokens, H, K], dtype)), ("k", T.Tensor([tokens, H, K], dtype)),
              ("g", T.Tensor([tokens, HV, K], gate_dtype))]
    if delta:
        inputs += [("beta", T.Tensor([tokens, HV], accum)), ("a_log", T.Tensor([HV], accum)),
                   ("dt_bias", T.Tensor([HV * K], accum))]
    outputs = [("tp", T.Tensor([HV, tokens, C], dtype)), ("m_out", T.Tensor([HV, tokens, C], dtype)),
               ("qo", T.Tensor([HV, tokens, K], dtype)), ("kx", T.Tensor([HV, tokens, K], dtype)),
               ("ks", T.Tensor([HV, tokens, K], dtype)), ("decay", T.Tensor([HV, decay_rows, K], accum))]
    if not delta:  # no T' and no K_x
        outputs = [outputs[1], outputs[2], outputs[4], outputs[5]]

    def norm(table, i):
        """Row i's L2-norm factor (``table``: rq_n or rk_n) where the call asks for it, else 1."""
        return table[i] if l2norm else 1.0

    cumsum = channel_cumsum(chunk=C, dim_k=K, threads=THREADS, tokens=tokens, varlen=varlen, nseq=nseq, delta=delta,
                            gate_in_kernel=gate_in_kernel, beta_sigmoid=beta_sigmoid, neg_eigval=neg_eigval,
                            lower_bound=lower_bound)
    rnorm = row_rnorm(C, K)
    solve = wy_solve(C, dtype)
    clear = upper_clear(C)
    pairs = block_pairs(C, K, delta)
    whole_window = window_fold(C, K, THREADS, delta)

    @T.macro
    def both_halves(a_s, d_s, a_f, m_f):
        """Both warpgroups' pair sums of the diagonal blocks onto the products, all read before the
        caller overwrites ``a_s`` and ``d_s`` (an entry and its mirror belong to different threads)."""
        for i, j in T.Parallel(C, C):
            if i // BLOCK == j // BLOCK:
                if delta:
                    a_f[i, j] = a_f[i, j] + a_s[i, j] + a_s[j, i]
                m_f[i, j] = m_f[i, j] + d_s[i, j] + T.if_then_else(i == j, d_s[i, C], d_s[j, i])

    @T.macro
    def scaled_rows(dst_s, x_s, gam_s, seg_s, first, rows, r, after, tx):
        """Rows first .. first + rows − 1 of x (those of r's sequence) times e^{γ − γ_r} (``after``:
        rows after r) or e^{γ_r − γ} (rows before r) into the same rows of ``dst_s`` (two tiles, the
        first and second half of the channels), in fp16. A
        thread takes 8 channels of a row, so that it reads γ_r once and stores 16 bytes; a warp's
        lanes take 8 rows and 4 channel groups, whose reads of γ fall in 32 banks."""
        groups = K // VEC  # of a row
        lane_rows = tx % ROWS_A_WARP
        c0 = lane_group(tx, groups)
        g_r = T.alloc_local([VEC], accum)
        x_l = T.alloc_local([VEC], accum)
        xv_l = T.alloc_local([VEC], dtype)
        for v in T.unroll(VEC, explicit=True):
            g_r[v] = gam_s[c0 + v, r]
        seg_r = seg_s[r]
        for it in T.serial(T.ceildiv(rows * groups, THREADS)):
            item = it * THREADS + tx
            if item < rows * groups:  # at K = 64 a pass takes 32 rows, more than a block holds
                i = first + item // (groups * ROWS_A_WARP) * ROWS_A_WARP + lane_rows
                own = seg_s[i] == seg_r
                for v in T.vectorized(VEC):
                    xv_l[v] = x_s[i, c0 + v]
                for v in T.unroll(VEC, explicit=True):
                    g_i = gam_s[c0 + v, i]
                    x_l[v] = T.if_then_else(own, T.cast(xv_l[v], accum) * T.exp2(T.if_then_else(after, g_i - g_r[v], g_r[v] - g_i)), 0.0)
                if c0 < K // 2:
                    for v in T.vectorized(VEC):
                        dst_s[0][i, c0 + v] = T.cast(x_l[v], operand)
                else:
                    for v in T.vectorized(VEC):
                        dst_s[1][i, c0 - K // 2 + v] = T.cast(x_l[v], operand)

    @T.macro
    def fold(x_s, gam_s, seg_s, left_s, blk, tx):
        """Block ``blk``'s rows of x (of r's sequence) times e^{γ − γ_r} into its rows of ``left_s``."""
        scaled_rows(left_s, x_s, gam_s, seg_s, blk * BLOCK, BLOCK, blk * BLOCK, True, tx)

    @T.macro
    def halves_product(left_s, rk_s, acc, first):
        """acc (+)= left · rkᵀ, each operand two tiles of half the channels."""
        T.gemm(left_s[0], rk_s[0], acc, transpose_B=True, clear_accum=first)
        T.gemm(left_s[1], rk_s[1], acc, transpose_B=True)

    @T.macro
    def earlier_blocks(q_s, k_s, gam_s, seg_s, left_s, rk_s, a_f, m_f, tx):
        """Each block's rows against the rows before it, about its first row: K Kᵀ into ``a_f``
        and Q Kᵀ into ``m_f`` (zero on and above the diagonal blocks). One left operand tile
        serves K's product, then Q's; each factor is formed only where it is kept, where it is at
        most 1 (elsewhere the exponent may overflow). Only the rows that hold something are
        written: the rows before r on the right (those after it stay zero), block I's on the left
        (the block before it zeroed)."""
        T.clear(left_s[0])
        T.clear(left_s[1])
        T.clear(rk_s[0])
        T.clear(rk_s[1])
        for blk in range(1, C // BLOCK):  # traced once per block: r and the first product's clear are constants
            r = blk * BLOCK
            scaled_rows(rk_s, k_s, gam_s, seg_s, 0, r, r, False, tx)
            if blk > 1:
                for i, c in T.Parallel(BLOCK, K // 2):
                    left_s[0][r - BLOCK + i, c] = T.cast(0.0, operand)
                    left_s[1][r - BLOCK + i, c] = T.cast(0.0, operand)
            if delta:
                fold(k_s, gam_s, seg_s, left_s, blk, tx)
                halves_product(left_s, rk_s, a_f, blk == 1)
            fold(q_s, gam_s, seg_s, left_s, blk, tx)
            halves_product(left_s, rk_s, m_f, blk == 1)

    @T.macro
    def store8(out, values, hv, t, c0):
        """VEC fp32 values, rounded to the token dtype, into out[hv, t, c0:c0 + VEC] with one store."""
        T.call_extern("handle", f"tileops_gdn::store8<{HALF_TYPES[dtype]}>", T.address_of(out[hv, t, c0]), values.data)

    @T.macro
    def decayed_operands(q_s, k_s, gam_s, rq_n, rk_n, span_s, qo, kx, ks, hv, t0, tx, threads):
        """Q_o, K_s and (with the delta rule) K_x into their outputs, by ``threads`` threads (``tx``
        counted from the first of them): a thread forms VEC channels of a row, their factors shared,
        and stores each output's 16 bytes at once (element by element, every store took a 64-bit
        address of its own: a fifth of the pass's instructions)."""
        q_l = T.alloc_local([VEC], accum)
        kx_l = T.alloc_local([VEC], accum)
        ks_l = T.alloc_local([VEC], accum)
        qv_l = T.alloc_local([VEC], dtype)
        kv_l = T.alloc_local([VEC], dtype)
        warps = threads // WARP
        for p in T.serial(C // (warps * ROWS_A_WARP)):
            i = (p * warps + tx // WARP) * ROWS_A_WARP + tx % ROWS_A_WARP
            if t0 + i < tokens:  # the row's values once, then its channel groups unrolled
                end = T.alloc_var("int32")
                end = span_last(span_s[i], C)
                key_norm = norm(rk_n, i)
                query_scale = scale * norm(rq_n, i)
                for it in T.unroll(K // VEC // (WARP // ROWS_A_WARP)):
                    c0 = (it * (WARP // ROWS_A_WARP) + tx % WARP // ROWS_A_WARP) * VEC
                    for v in T.vectorized(VEC):
                        qv_l[v] = q_s[i, c0 + v]
                    for v in T.vectorized(VEC):
                        kv_l[v] = k_s[i, c0 + v]
                    for v in T.unroll(VEC, explicit=True):
                        g_i = gam_s[c0 + v, i]
                        from_start = T.exp2(g_i)
                        key = key_norm * T.cast(kv_l[v], accum)
                        q_l[v] = query_scale * T.cast(qv_l[v], accum) * from_start
                        if delta:
                            kx_l[v] = key * from_start
                        ks_l[v] = key * T.exp2(gam_s[c0 + v, end] - g_i)
                    store8(qo, q_l, hv, t0 + i, c0)
                    if delta:
                        store8(kx, kx_l, hv, t0 + i, c0)
                    store8(ks, ks_l, hv, t0 + i, c0)

    @T.macro
    def decayed_row(qo, ks, gam_s, span_s, rq_n, rk_n, hv, t0, i, c0, q_l, k_l, rho_l, up_l):
        """Without the delta rule, in the whole-window fold: Q_o and K_s of row i's VEC channels
        from c0 out of Q Kᵀ's fill, q̃ ⊙ 2^ρ and k̃ ⊙ 2^{γ_end − ρ} (q̃ = q ⊙ 2^{γ − ρ}, k̃ = k ⊙
        2^{ρ − γ}, every factor within the fold's reach): no second read of q, k and γ, and one
        exp2 an element instead of two. KDA's stay beside its solve, on the warpgroup the solve
        leaves idle: formed in its fills, they made its pass slower (docs/kda-gated-products.md)."""
        qo_l = T.alloc_local([VEC], accum)
        ks_l = T.alloc_local([VEC], accum)
        if t0 + i < tokens:
            end = T.alloc_var("int32")
            end = span_last(span_s[i], C)
            query_scale = scale * norm(rq_n, i)
            key_norm = norm(rk_n, i)
            for v in T.unroll(VEC, explicit=True):
                qo_l[v] = query_scale * q_l[v] * up_l[v]
                ks_l[v] = key_norm * k_l[v] * T.exp2(gam_s[c0 + v, end] - rho_l[v])
            store8(qo, qo_l, hv, t0 + i, c0)
            store8(ks, ks_l, hv, t0 + i, c0)

    @T.macro
    def solve_window(q, k, g, beta, a_log, dt_bias, bounds, tp, m_out, qo, kx, ks, decay, hv, w):
        h = hv // group
        t0 = w * C
        q_s = T.alloc_shared([C, K + ROW_SKEW], dtype)
        k_s = T.alloc_shared([C, K + ROW_SKEW], dtype)
        gam_s = T.alloc_shared([K, C + 1], accum)  # γ by channel: a warp's 8 rows of 4 channel groups in 32 banks
        # The products' operand tiles, each of half the channels: the blocks' fp16 ones, whose
        # memory the whole-window fold takes as bf16 (x̃ and k̃ in two parts each).
        left_a = T.alloc_shared([C, K // 2], operand)
        left_b = T.alloc_shared([C, K // 2], operand)
        rk_a = T.alloc_shared([C, K // 2], operand)
        rk_b = T.alloc_shared([C, K // 2], operand)
        hi_s, lo_s = T.view(left_a, dtype="bfloat16"), T.view(left_b, dtype="bfloat16")
        khi_s, klo_s = T.view(rk_a, dtype="bfloat16"), T.view(rk_b, dtype="bfloat16")
        m_f = T.alloc_fragment([C, C], accum)
        d_s = T.alloc_shared([C, C + PAD], accum)
        m_s = T.alloc_shared([C, C + ROW_PAD], dtype)
        a_f = a_s = w_s = b_s = None  # the delta rule's A, its solve and β
        if delta:
            a_f = T.alloc_fragment([C, C], accum)
            a_s = T.alloc_shared([C, C + PAD], accum)
            w_s = T.alloc_shared([4 * BLOCK, SCRATCH_LD], accum)
            b_s = T.alloc_shared([C], accum)
        rk_n = T.alloc_shared([C], accum)
        rq_n = T.alloc_shared([C], accum)
        seg_s = T.alloc_shared([C], "int32")
        span_s = T.alloc_shared([C], "int32")
        rho_s = T.alloc_shared([K], accum)
        fit_s = T.alloc_shared([THREADS // WARP], "int32")
        tx = T.get_thread_binding()

        # g's loads first, into registers, beside the tiles': every load of the window issues
        # before the first store.
        g_l = T.alloc_local([cumsum.rows_held], accum)  # the raw gates (fp32), then γ
        g_in = g_l if gate_dtype == accum else T.alloc_local([cumsum.rows_held], gate_dtype)
        masks = T.alloc_local([MASK_WORDS], "uint32")
        cumsum.gate_loads(g, g_in, hv, t0, tx)
        T.copy(k[t0:t0 + C, h, :], k_s[0:C, 0:K])
        T.copy(q[t0:t0 + C, h, :], q_s[0:C, 0:K])
        cumsum.rows(beta, bounds, b_s, seg_s, span_s, masks, hv, t0, tx)
        if l2norm:
            rnorm(k_s[0:C, 0:K], rk_n)
            rnorm(q_s[0:C, 0:K], rq_n)
        cumsum.scan(g_in, g_l, a_log, dt_bias, masks, gam_s, rho_s, fit_s, decay, hv, w, t0, tx)
        T.sync_threads()
        cumsum.segment_decays(g_l, masks, seg_s, decay, hv, tx)
        fit = T.alloc_var("int32")
        fit = 1
        for v in T.unroll(THREADS // WARP, explicit=True):
            fit = fit & fit_s[v]
        # A span past FOLD_REACH: the blocks about their first rows, the pairs about their middle
        # ones. Two branches in turn, so that the pairs' tiles may take the operand tiles' memory.
        # Without the delta rule the fold's fill forms Q_o and K_s too.
        emit = None if delta else functools.partial(decayed_row, qo, ks, gam_s, span_s, rq_n, rk_n, hv, t0)
        if fit == 1:
            whole_window(q_s, k_s, gam_s, rho_s, seg_s, hi_s, lo_s, khi_s, klo_s, a_f, m_f, tx, emit)
        else:
            earlier_blocks(q_s, k_s, gam_s, seg_s, (left_a, left_b), (rk_a, rk_b), a_f, m_f, tx)
        T.sync_threads()
        if fit == 0:
            pairs(q_s, k_s, gam_s, a_s if delta else d_s, d_s, tx)
            T.sync_threads()
            both_halves(a_s, d_s, a_f, m_f)
        # The masks and factors in the fragments, then the stores: with the stores between them, every
        # element read its row's and column's tables again (13–18 % of the pass's stall samples).
        for i, j in T.Parallel(C, C):
            kept = j >= span_first(span_s[i]) and t0 + i < tokens  # i's sequence, from its first row
            if delta:
                a_f[i, j] = T.if_then_else(kept and j < i, b_s[i] * norm(rk_n, i) * norm(rk_n, j) * a_f[i, j], 0.0)
            m_f[i, j] = T.if_then_else(kept and j <= i, scale * norm(rq_n, i) * norm(rk_n, j) * m_f[i, j], 0.0)
        for i, j in T.Parallel(C, C):
            if delta:
                a_s[i, j] = a_f[i, j]
            m_s[i, j] = m_f[i, j]
        for i, j in T.Parallel(C, C):
            if t0 + i < tokens:
                m_out[hv, t0 + i, j] = m_s[i, j]
        if delta:  # the second warpgroup forms the decayed operands while the first solves
            clear(d_s)
            T.sync_threads()  # the merge's barriers count one warpgroup
            if tx < WARPGROUP:
                solve(a_s, d_s, w_s, tx)
            else:
                decayed_operands(q_s, k_s, gam_s, rq_n, rk_n, span_s, qo, kx, ks, hv, t0, tx - WARPGROUP, WARPGROUP)
            T.sync_threads()
            for i, j in T.Parallel(C, C):
                if t0 + i < tokens:
                    tp[hv, t0 + i, j] = d_s[i, j] * b_s[j]
        elif fit == 0:  # else the fold's fill formed them
            decayed_operands(q_s, k_s, gam_s, rq_n, rk_n, span_s, qo, kx, ks, hv, t0, tx, THREADS)

    @T.macro
    def grid(q, k, g, beta, a_log, dt_bias, tp, m_out, qo, kx, ks, decay, seqs):
        with T.Kernel(HV, T.ceildiv(tokens, C), threads=THREADS, prelude=SOURCE + PAIRS_SOURCE + STORE8) as (hv, w):
            T.annotate_min_blocks_per_sm(2)  # at most 128 registers a thread
            solve_window(q, k, g, beta, a_log, dt_bias, seqs.bounds, tp, m_out, qo, kx, ks, decay, hv, w)

    def launch(*args):
        """The entry's arguments, with None for what a call without the delta rule lacks."""
        if delta:
            return grid(*args)
        q, k, g, m_out, qo, ks, decay, seqs = args
        return grid(q, k, g, None, None, None, None, m_out, qo, None, ks, decay, seqs)

    return kernel_entry("prep_channel", seqs, inputs, outputs, launch)

"""First pass of the GDN prefill: per chunk, everything that does not depend on the state.

Chunks are the C-token windows of the packed token axis, cut further at sequence boundaries:
a window may hold the end of one sequence and the start of the next (packed varlen, or equal
lengths that are not a multiple of C). Pairs of tokens interact only inside one sequence, so
every product below is block-diagonal per sequence and γ (the gate cumsum) restarts at each
sequence start. One CTA per (value head, window): no chunk table, and every token row is
written by exactly one CTA.

With r the L2-norm factors (1 without the norm) and γ_end the γ of the last row of the token's
sequence inside the window, it writes per token row, for the state pass:

    T' = (I + A)⁻¹ diag(β)                                   (the WY solve)
    M  = L ⊙ scale·(r_q r_kᵀ) ⊙ Q Kᵀ ⊙ e^{γ_i − γ_j}          (the chunk's own attention)
    f_x = e^γ r_k    f_o = scale·e^γ r_q    f_s = e^{γ_end − γ} r_k    f_c = e^{γ_end}

T' and M in the input dtype, the factors in fp32: about 0.27 KB per token per value head. The
input transforms (gate in kernel, β sigmoid, L2 norm) are applied here, so the state pass reads
q, k and v as given and evaluates no transcendental.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.gdn.prefill import PAD, ROW_PAD, WARPGROUP
from tileops.kernels.gdn.wy_merge import BLOCK, SCRATCH_LD, SOURCE, block_merge

LANES = 8  # partial sums per row of the forward substitution
NEWEST = 2  # entries of a column subtracted last in each row of it, outside the partial sums


def gate_transform(raw, a_log, dt_bias):
    """GDN's gate in kernel: -exp(A_log) * softplus(raw + dt_bias), softplus linear above 20."""
    x = raw + dt_bias
    return -T.exp(a_log) * T.if_then_else(x > 20.0, x, T.log1p(T.exp(x)))


def lane_total(acc, lanes: int = LANES):
    """The sum of ``lanes`` partial sums (an expression, built when the program is traced), added
    pairwise: log2(lanes) dependent additions instead of lanes − 1."""
    terms = [acc[p] for p in range(lanes)]
    while len(terms) > 1:
        terms = [terms[p] + terms[p + 1] if p + 1 < len(terms) else terms[p] for p in range(0, len(terms), 2)]
    return terms[0]


def input_transforms(*, gate_in_kernel: bool, beta_sigmoid: bool, neg_eigval: bool):
    """A macro that writes one token's gate and step size, transformed as the flags say, into
    row ``row`` of ``g_s`` and ``b_s``."""

    @T.macro
    def transform(raw_g, raw_b, a_log, dt_bias, hv, g_s, b_s, row):
        if gate_in_kernel:
            g_s[row] = gate_transform(raw_g, T.cast(a_log[hv], "float32"), T.cast(dt_bias[hv], "float32"))
        else:
            g_s[row] = raw_g
        if beta_sigmoid:
            b_s[row] = T.sigmoid(raw_b) * (2.0 if neg_eigval else 1.0)
        else:
            b_s[row] = raw_b

    return transform


def row_rnorm(rows: int, width: int):
    """A macro that writes 1 / ‖row‖ of ``rows`` rows of a ``width``-wide tile (the L2 norm's factors)."""

    @T.macro
    def rnorm(src_s, dst_s):
        sq_f = T.alloc_fragment([rows, width], "float32")
        ss_f = T.alloc_fragment([rows], "float32")
        T.copy(src_s, sq_f)
        for i, j in T.Parallel(rows, width):
            sq_f[i, j] = sq_f[i, j] * sq_f[i, j]
        T.reduce_sum(sq_f, ss_f, dim=1)
        for i in T.Parallel(rows):
            dst_s[i] = T.rsqrt(ss_f[i] + 1e-6)

    return rnorm


def key_products(*, rows: int, width: int, l2norm: bool, keys_first: bool = False, wait: bool = True):
    """A macro that writes the L2 norm's row factors of q and k (ones without the norm), then
    K Kᵀ into ``a_f`` and Q Kᵀ into ``qk_f`` (K Qᵀ with ``keys_first``). Without ``wait`` it only
    starts the two products on one warpgroup's tensor cores; the caller waits for them
    (``T.wait_wgmma(0)``) and fences their accumulators."""
    rnorm = row_rnorm(rows, width)

    @T.macro
    def products(q_s, k_s, rq_s, rk_s, a_f, qk_f):
        if l2norm:
            rnorm(k_s, rk_s)
            rnorm(q_s, rq_s)
        else:
            for i in T.Parallel(rows):
                rk_s[i] = 1.0
                rq_s[i] = 1.0

        gemm = T.gemm if wait else T.wgmma_gemm
        gemm(k_s, k_s, a_f, transpose_B=True, clear_accum=True)
        if keys_first:
            gemm(k_s, q_s, qk_f, transpose_B=True, clear_accum=True)
        else:
            gemm(q_s, k_s, qk_f, transpose_B=True, clear_accum=True)

    return products


def block_substitution(block: int):
    """A macro that writes into the local ``x`` (``block`` entries) column ``col_thread % block``
    of the inverse of diagonal block ``col_thread // block`` of I + A (A strictly lower, fp32, in
    ``a_s``), by forward substitution with the column in registers.

    A row's terms from all but its NEWEST newest entries are summed in LANES partial sums while
    those entries are still being found, and the newest are subtracted last: the chain from one
    row to the next is NEWEST multiply-adds."""
    B = block

    @T.macro
    def substitute(a_s, x, col_thread):
        acc = T.alloc_local([LANES], "float32")
        blk = col_thread // B
        col = col_thread % B
        for r in T.unroll(B, explicit=True):
            for p in T.unroll(LANES, explicit=True):
                acc[p] = 0.0
            for j in T.unroll(B, explicit=True):
                if j < r - NEWEST:
                    acc[j % LANES] = acc[j % LANES] - a_s[blk * B + r, blk * B + j] * x[j]
            x[r] = T.if_then_else(col == r, 1.0, 0.0) + lane_total(acc)
            for j in T.unroll(B, explicit=True):
                if r - NEWEST <= j and j < r:
                    x[r] = x[r] - a_s[blk * B + r, blk * B + j] * x[j]

    return substitute


def upper_clear(chunk: int):
    """A macro that zeroes ``d_s`` above its diagonal BLOCK × BLOCK blocks, where ``wy_solve``
    leaves it untouched: once for every solve that reuses the tile."""
    C = chunk

    @T.macro
    def clear(d_s):
        for i, j in T.Parallel(C, C):
            if i // BLOCK < j // BLOCK:
                d_s[i, j] = 0.0

    return clear


def wy_solve(chunk: int, dtype: str):
    """A macro for the 128 threads of one warpgroup (``row`` 0..127) that writes (I + A)⁻¹ into
    ``d_s`` on and below its diagonal blocks, from A (strictly lower, fp32, in ``a_s``): the
    diagonal blocks' inverses by ``block_substitution`` (one thread per column, exact in fp32),
    then the blocks below them by ``wy_merge.block_merge`` on the tensor cores. ``w_s``
    ([4 · BLOCK, SCRATCH_LD] fp32) is scratch; the kernel's prelude needs ``wy_merge.SOURCE``."""
    C = chunk
    substitute = block_substitution(BLOCK)
    merge = block_merge(C, dtype)

    @T.macro
    def solve(a_s, d_s, w_s, row):
        x = T.alloc_local([BLOCK], "float32")
        if row < C:
            substitute(a_s, x, row)
            for r in T.unroll(BLOCK, explicit=True):
                d_s[row // BLOCK * BLOCK + r, row] = x[r]
        merge(a_s, d_s, w_s, row)

    return solve


def prep_program(*, heads: int, value_heads: int, dim_k: int, chunk: int, dtype: str, varlen: bool,
                 l2norm: bool, gate_in_kernel: bool, beta_sigmoid: bool, neg_eigval: bool, scale: float):
    """The TileLang program of the first pass, specialised on everything but lengths and counts.

    Tokens are flattened to [B·T]. Fixed length: ``seq_len`` gives T. Varlen: ``cu_seqlens``
    (int32, [N+1]) bounds the sequences. g, beta, A_log and dt_bias are read in fp32. Outputs: ``tp`` and ``m`` [HV, tokens, C] in the input
    dtype, ``f`` [4, HV, tokens] (f_x, f_o, f_s, f_c) in fp32.
    Grid: (HV, ceil(tokens / C)), one warpgroup each: a thread per row, and a warp per block row of
    the WY merge.
    """
    H, HV, K, C = heads, value_heads, dim_k, chunk
    group = HV // H
    accum = "float32"
    tokens = T.dynamic("tokens")
    nseq = T.dynamic("nseq")

    products = key_products(rows=C, width=K, l2norm=l2norm)
    transform = input_transforms(gate_in_kernel=gate_in_kernel, beta_sigmoid=beta_sigmoid, neg_eigval=neg_eigval)
    solve = wy_solve(C, dtype)
    clear = upper_clear(C)

    @T.macro
    def solve_window(q, k, g, beta, a_log, dt_bias, bounds, tp, m_out, f_out, hv, w):
        h = hv // group
        t0 = w * C
        q_s = T.alloc_shared([C, K], dtype)
        k_s = T.alloc_shared([C, K], dtype)
        a_f = T.alloc_fragment([C, C], accum)
        qk_f = T.alloc_fragment([C, C], accum)
        a_s = T.alloc_shared([C, C + PAD], accum)
        d_s = T.alloc_shared([C, C + PAD], accum)
        w_s = T.alloc_shared([4 * BLOCK, SCRATCH_LD], accum)
        m_s = T.alloc_shared([C, C + ROW_PAD], dtype)
        g_s = T.alloc_shared([C], accum)
        p_s = T.alloc_shared([C], accum)
        gam_s = T.alloc_shared([C], accum)
        b_s = T.alloc_shared([C], accum)
        rk_s = T.alloc_shared([C], accum)
        rq_s = T.alloc_shared([C], accum)
        seg_s = T.alloc_shared([C], "int32")
        beg_s = T.alloc_shared([C], "int32")
        end_s = T.alloc_shared([C], "int32")
        seg = T.alloc_var("int32")
        s_beg = T.alloc_var("int32")
        s_end = T.alloc_var("int32")
        tx = T.get_thread_binding()

        T.copy(k[t0:t0 + C, h, :], k_s)
        T.copy(q[t0:t0 + C, h, :], q_s)
        clear(d_s)
        if tx < C:
            t = t0 + tx
            # The sequence holding token t: a binary search of cu_seqlens, or a division.
            if varlen:
                lo = T.alloc_var("int32", init=0)
                hi = T.alloc_var("int32", init=nseq)
                while hi - lo > 1:
                    mid = (lo + hi) >> 1
                    if bounds[mid] <= t:
                        lo = mid
                    else:
                        hi = mid
                seg = lo
                s_beg = bounds[lo]
                s_end = bounds[lo + 1]
            else:
                seg = t // bounds
                s_beg = seg * bounds
                s_end = s_beg + bounds
            seg_s[tx] = seg
            beg_s[tx] = T.max(s_beg - t0, 0)
            end_s[tx] = T.max(T.min(s_end - t0, C) - 1, 0)
            if t < s_end and t < tokens and s_beg <= t:
                transform(T.cast(g[t, hv], accum), T.cast(beta[t, hv], accum), a_log, dt_bias, hv, g_s, b_s, tx)
            else:
                g_s[tx] = 0.0
                b_s[tx] = 0.0
        T.cumsum(g_s, p_s, dim=0)
        for i in T.Parallel(C):
            gam_s[i] = p_s[i] - T.if_then_else(beg_s[i] > 0, p_s[T.max(beg_s[i] - 1, 0)], 0.0)
        products(q_s, k_s, rq_s, rk_s, a_f, qk_f)
        # One pass over the pairs: the decay e^{γ_i − γ_j} and the masks serve A and M alike. It
        # writes registers only, so the compiler keeps each row's and column's factors in
        # registers instead of reloading them after every store to shared memory.
        for i, j in T.Parallel(C, C):
            decay = T.if_then_else(j <= i and seg_s[i] == seg_s[j], T.exp(gam_s[i] - gam_s[j]) * rk_s[j], 0.0)
            a_f[i, j] = T.if_then_else(j < i, b_s[i] * rk_s[i] * decay * a_f[i, j], 0.0)
            qk_f[i, j] = (scale * rq_s[i]) * decay * qk_f[i, j]
        for i, j in T.Parallel(C, C):
            a_s[i, j] = a_f[i, j]
            m_s[i, j] = qk_f[i, j]
        for i, j in T.Parallel(C, C):
            if t0 + i < tokens:
                m_out[hv, t0 + i, j] = m_s[i, j]

        solve(a_s, d_s, w_s, tx)
        for i, j in T.Parallel(C, C):
            if t0 + i < tokens:
                tp[hv, t0 + i, j] = d_s[i, j] * b_s[j]
        for i in T.Parallel(C):
            if t0 + i < tokens:
                f_out[0, hv, t0 + i] = T.exp(gam_s[i]) * rk_s[i]
                f_out[1, hv, t0 + i] = scale * T.exp(gam_s[i]) * rq_s[i]
                f_out[2, hv, t0 + i] = T.exp(gam_s[end_s[i]] - gam_s[i]) * rk_s[i]
                f_out[3, hv, t0 + i] = T.exp(gam_s[end_s[i]])

    if varlen:
        @T.prim_func
        def prep(
            q: T.Tensor([tokens, H, K], dtype),
            k: T.Tensor([tokens, H, K], dtype),
            g: T.Tensor([tokens, HV], accum),
            beta: T.Tensor([tokens, HV], accum),
            a_log: T.Tensor([HV], accum),
            dt_bias: T.Tensor([HV], accum),
            cu_seqlens: T.Tensor([nseq + 1], "int32"),
            tp: T.Tensor([HV, tokens, C], dtype),
            m_out: T.Tensor([HV, tokens, C], dtype),
            f_out: T.Tensor([4, HV, tokens], accum),
        ):
            with T.Kernel(HV, T.ceildiv(tokens, C), threads=WARPGROUP, prelude=SOURCE) as (hv, w):
                solve_window(q, k, g, beta, a_log, dt_bias, cu_seqlens, tp, m_out, f_out, hv, w)
    else:
        @T.prim_func
        def prep(
            q: T.Tensor([tokens, H, K], dtype),
            k: T.Tensor([tokens, H, K], dtype),
            g: T.Tensor([tokens, HV], accum),
            beta: T.Tensor([tokens, HV], accum),
            a_log: T.Tensor([HV], accum),
            dt_bias: T.Tensor([HV], accum),
            tp: T.Tensor([HV, tokens, C], dtype),
            m_out: T.Tensor([HV, tokens, C], dtype),
            f_out: T.Tensor([4, HV, tokens], accum),
            seq_len: T.int32,
        ):
            with T.Kernel(HV, T.ceildiv(tokens, C), threads=WARPGROUP, prelude=SOURCE) as (hv, w):
                solve_window(q, k, g, beta, a_log, dt_bias, seq_len, tp, m_out, f_out, hv, w)

    return prep

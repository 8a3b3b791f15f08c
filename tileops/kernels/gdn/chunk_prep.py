"""First pass of the GDN prefill: per chunk, the gate cumsum γ and the WY solve T' = (I + A)⁻¹ diag(β).

Chunks are the C-token windows of the packed token axis, cut further at sequence boundaries:
a window may hold the end of one sequence and the start of the next (packed varlen, or equal
lengths that are not a multiple of C). A is masked to pairs of the same sequence, so T' is
block-diagonal per sequence and γ restarts at each sequence start. One CTA per (value head,
window): no chunk table, and every token row is written by exactly one CTA.

It applies the input transforms (gate in kernel, β sigmoid, L2 norm of k) on the fly, reads k,
g and β once and writes T' (C×C in the input dtype, one row per token) and γ (fp32), about
0.13 KB per token per value head, for the state pass.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

LANES = 4  # partial sums per row of the forward substitution
PAD = 4  # fp32 words of padding per row of the solve's buffers: conflict-free rows and columns


def gate_transform(raw, a_log, dt_bias):
    """GDN's gate in kernel: -exp(A_log) * softplus(raw + dt_bias), softplus linear above 20."""
    x = raw + dt_bias
    return -T.exp(a_log) * T.if_then_else(x > 20.0, x, T.log1p(T.exp(x)))


def prep_program(*, heads: int, value_heads: int, dim_k: int, chunk: int, dtype: str,
                 g_dtype: str, beta_dtype: str, a_log_dtype: str, dt_bias_dtype: str, varlen: bool, l2norm: bool, gate_in_kernel: bool,
                 beta_sigmoid: bool, neg_eigval: bool, threads: int = 128):
    """The TileLang program of the first pass, specialised on everything but lengths and counts.

    Tokens are flattened to [B·T]. Fixed length: ``seq_len`` gives T. Varlen: ``cu_seqlens``
    (int32, [N+1]) bounds the sequences. Outputs: ``tp`` [HV, tokens, C] and ``gam``
    [HV, tokens]. Grid: (HV, ceil(tokens / C)).
    """
    H, HV, K, C = heads, value_heads, dim_k, chunk
    group = HV // H
    half = C // 2
    accum = "float32"
    tokens = T.dynamic("tokens")
    nseq = T.dynamic("nseq")
    assert C <= threads, "one thread per row, and per column of the solve"

    @T.macro
    def solve_window(k, g, beta, a_log, dt_bias, bounds, tp, gam, hv, w):
        h = hv // group
        t0 = w * C
        k_s = T.alloc_shared([C, K], dtype)
        a_f = T.alloc_fragment([C, C], accum)
        a_s = T.alloc_shared([C, C + PAD], accum)
        d_s = T.alloc_shared([C, C + PAD], accum)
        l_s = T.alloc_shared([C, C], dtype)
        dl_s = T.alloc_shared([C, C], dtype)
        y_s = T.alloc_shared([C, C], dtype)
        y_f = T.alloc_fragment([C, C], accum)
        t_s = T.alloc_shared([C, C], dtype)
        g_s = T.alloc_shared([C], accum)
        p_s = T.alloc_shared([C], accum)
        gam_s = T.alloc_shared([C], accum)
        b_s = T.alloc_shared([C], accum)
        r_s = T.alloc_shared([C], accum)
        seg_s = T.alloc_shared([C], "int32")
        beg_s = T.alloc_shared([C], "int32")
        x = T.alloc_local([half], accum)
        acc = T.alloc_local([LANES], accum)
        seg = T.alloc_var("int32")
        s_beg = T.alloc_var("int32")
        s_end = T.alloc_var("int32")
        tx = T.get_thread_binding()

        T.copy(k[t0:t0 + C, h, :], k_s)
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
            if t < s_end and t < tokens and s_beg <= t:
                raw_g = T.cast(g[t, hv], accum)
                raw_b = T.cast(beta[t, hv], accum)
                if gate_in_kernel:
                    g_s[tx] = gate_transform(raw_g, T.cast(a_log[hv], accum), T.cast(dt_bias[hv], accum))
                else:
                    g_s[tx] = raw_g
                if beta_sigmoid:
                    b_s[tx] = T.sigmoid(raw_b) * (2.0 if neg_eigval else 1.0)
                else:
                    b_s[tx] = raw_b
            else:
                g_s[tx] = 0.0
                b_s[tx] = 0.0
        T.cumsum(g_s, p_s, dim=0)
        for i in T.Parallel(C):
            gam_s[i] = p_s[i] - T.if_then_else(beg_s[i] > 0, p_s[T.max(beg_s[i] - 1, 0)], 0.0)
        if l2norm:
            sq_f = T.alloc_fragment([C, K], accum)
            ss_f = T.alloc_fragment([C], accum)
            T.copy(k_s, sq_f)
            for i, j in T.Parallel(C, K):
                sq_f[i, j] = sq_f[i, j] * sq_f[i, j]
            T.reduce_sum(sq_f, ss_f, dim=1)
            for i in T.Parallel(C):
                r_s[i] = T.rsqrt(ss_f[i] + 1e-6)
        else:
            for i in T.Parallel(C):
                r_s[i] = 1.0

        T.gemm(k_s, k_s, a_f, transpose_B=True, clear_accum=True)
        for i, j in T.Parallel(C, C):
            a_s[i, j] = T.if_then_else(
                j < i and seg_s[i] == seg_s[j],
                b_s[i] * T.exp(gam_s[i] - gam_s[j]) * r_s[i] * r_s[j] * a_f[i, j], 0.0)
            l_s[i, j] = T.if_then_else(
                j < half and half <= i and seg_s[i] == seg_s[j],
                b_s[i] * T.exp(gam_s[i] - gam_s[j]) * r_s[i] * r_s[j] * a_f[i, j], 0.0)

        # T = (I + A)⁻¹ by halves: each diagonal half block of D is inverted by forward
        # substitution (one thread per column, the column in registers, each row's sum split in
        # LANES partial sums), then T = D⁻¹ - D⁻¹ L D⁻¹ with L the lower-left block of A: two
        # tensor-core products in the input dtype, D⁻¹ itself kept in fp32.
        blk = tx // half
        col = tx % half
        if tx < C:
            for r in T.unroll(half, explicit=True):
                for p in T.unroll(LANES, explicit=True):
                    acc[p] = 0.0
                for j in T.unroll(half, explicit=True):
                    if j < r:
                        acc[j % LANES] = acc[j % LANES] - a_s[blk * half + r, blk * half + j] * x[j]
                x[r] = T.if_then_else(col == r, 1.0, 0.0) + acc[0] + acc[1] + acc[2] + acc[3]
            for r in T.unroll(half, explicit=True):
                d_s[blk * half + r, tx] = x[r]
                d_s[(1 - blk) * half + r, tx] = 0.0
                dl_s[blk * half + r, tx] = x[r]
                dl_s[(1 - blk) * half + r, tx] = 0.0
        T.gemm(l_s, dl_s, y_f, clear_accum=True)
        T.copy(y_f, y_s)
        T.gemm(dl_s, y_s, y_f, clear_accum=True)
        for i, j in T.Parallel(C, C):
            t_s[i, j] = (d_s[i, j] - y_f[i, j]) * b_s[j]
        for i, j in T.Parallel(C, C):
            if t0 + i < tokens:
                tp[hv, t0 + i, j] = t_s[i, j]
        for i in T.Parallel(C):
            if t0 + i < tokens:
                gam[hv, t0 + i] = gam_s[i]

    if varlen:
        @T.prim_func
        def prep(
            k: T.Tensor([tokens, H, K], dtype),
            g: T.Tensor([tokens, HV], g_dtype),
            beta: T.Tensor([tokens, HV], beta_dtype),
            a_log: T.Tensor([HV], a_log_dtype),
            dt_bias: T.Tensor([HV], dt_bias_dtype),
            cu_seqlens: T.Tensor([nseq + 1], "int32"),
            tp: T.Tensor([HV, tokens, C], dtype),
            gam: T.Tensor([HV, tokens], accum),
        ):
            with T.Kernel(HV, T.ceildiv(tokens, C), threads=threads) as (hv, w):
                solve_window(k, g, beta, a_log, dt_bias, cu_seqlens, tp, gam, hv, w)
    else:
        @T.prim_func
        def prep(
            k: T.Tensor([tokens, H, K], dtype),
            g: T.Tensor([tokens, HV], g_dtype),
            beta: T.Tensor([tokens, HV], beta_dtype),
            a_log: T.Tensor([HV], a_log_dtype),
            dt_bias: T.Tensor([HV], dt_bias_dtype),
            tp: T.Tensor([HV, tokens, C], dtype),
            gam: T.Tensor([HV, tokens], accum),
            seq_len: T.int32,
        ):
            with T.Kernel(HV, T.ceildiv(tokens, C), threads=threads) as (hv, w):
                solve_window(k, g, beta, a_log, dt_bias, seq_len, tp, gam, hv, w)

    return prep

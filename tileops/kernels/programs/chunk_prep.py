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

from tileops.kernels.blocks.entry import Sequences, kernel_entry
from tileops.kernels.blocks.kkt import key_products
from tileops.kernels.blocks.solve_tril import upper_clear, wy_solve
from tileops.kernels.blocks.transforms import input_transforms
from tileops.kernels.blocks.wy_merge import BLOCK, SCRATCH_LD, SOURCE
from tileops.kernels.hardware import WARPGROUP
from tileops.kernels.plans.tiles import PAD, ROW_PAD


def prep_program(*, heads: int, value_heads: int, dim_k: int, chunk: int, dtype: str, sequences: str,
                 l2norm: bool, gated: bool, gate_in_kernel: bool, beta_sigmoid: bool, neg_eigval: bool, scale: float,
                 inverse_out: bool = False):
    """The TileLang program of the first pass, specialised on everything but lengths and counts.

    Arguments: q, k, g, beta, a_log, dt_bias, then the tables of ``sequences`` (equal or packed:
    ``blocks.entry``), then the outputs ``tp`` and ``m_out`` [HV, tokens, C] in the input dtype and
    ``f_out`` [4, HV, tokens] (f_x, f_o, f_s, f_c) in fp32; g, beta, A_log and dt_bias in fp32.
    ``inverse_out``: one more output, ``a_inv`` [HV, tokens, C] in the input dtype, the inverse
    (I + A)⁻¹ itself (T' without its diag(β); what the chunked training ops return).
    Grid: (HV, ceil(tokens / C)), one warpgroup each: a thread per row, and a warp per block row of
    the WY merge.
    """
    H, HV, K, C = heads, value_heads, dim_k, chunk
    group = HV // H
    accum = "float32"
    tokens = T.dynamic("tokens")
    seqs = Sequences(sequences, HV, with_state=False, tokens=tokens)
    nseq = seqs.nseq
    varlen = sequences == "packed"
    inputs = [("q", T.Tensor([tokens, H, K], dtype)), ("k", T.Tensor([tokens, H, K], dtype)),
              ("g", T.Tensor([tokens, HV], accum)), ("beta", T.Tensor([tokens, HV], accum)),
              ("a_log", T.Tensor([HV], accum)), ("dt_bias", T.Tensor([HV], accum))]
    outputs = [("tp", T.Tensor([HV, tokens, C], dtype)), ("m_out", T.Tensor([HV, tokens, C], dtype)),
               ("f_out", T.Tensor([4, HV, tokens], accum))]
    if inverse_out:
        outputs.append(("a_inv", T.Tensor([HV, tokens, C], dtype)))

    products = key_products(rows=C, width=K, l2norm=l2norm)
    transform = input_transforms(gate_in_kernel=gate_in_kernel, beta_sigmoid=beta_sigmoid,
                                 neg_eigval=neg_eigval)
    solve = wy_solve(C, dtype)
    clear = upper_clear(C)

    @T.macro
    def solve_window(q, k, g, beta, a_log, dt_bias, bounds, tp, m_out, f_out, a_inv, hv, w):
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
                raw_g = T.cast(g[t, hv], accum) if gated else 0.0  # without a gate g is not read
                transform(raw_g, T.cast(beta[t, hv], accum), a_log, dt_bias, hv, g_s, b_s, tx)
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
        if inverse_out:
            for i, j in T.Parallel(C, C):
                if t0 + i < tokens:
                    a_inv[hv, t0 + i, j] = d_s[i, j]
        for i in T.Parallel(C):
            if t0 + i < tokens:
                f_out[0, hv, t0 + i] = T.exp(gam_s[i]) * rk_s[i]
                f_out[1, hv, t0 + i] = scale * T.exp(gam_s[i]) * rq_s[i]
                f_out[2, hv, t0 + i] = T.exp(gam_s[end_s[i]] - gam_s[i]) * rk_s[i]
                f_out[3, hv, t0 + i] = T.exp(gam_s[end_s[i]])

    @T.macro
    def grid(q, k, g, beta, a_log, dt_bias, tp, m_out, f_out, a_inv, seqs):
        with T.Kernel(HV, T.ceildiv(tokens, C), threads=WARPGROUP, prelude=SOURCE) as (hv, w):
            solve_window(q, k, g, beta, a_log, dt_bias, seqs.bounds, tp, m_out, f_out, a_inv, hv, w)

    def launch(*args):
        """The entry's arguments: the inverse's output before ``seqs`` with ``inverse_out``."""
        return grid(*args) if inverse_out else grid(*args[:-1], None, args[-1])

    return kernel_entry("prep", seqs, inputs, outputs, launch)

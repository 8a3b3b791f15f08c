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

The gated products (docs/kda-gated-products.md): the 16-row blocks I > 0 meet the rows before
them through one tensor-core product each, of K ⊙ e^{γ − γ_r} (block I's rows, r its first) and
K ⊙ e^{γ_r − γ} (the rows before r), every factor at most 1, in fp16; a factor whose row lies in
another sequence than r is zero, so no pair crosses a sequence. Inside a block the pairs are
formed one by one in fp32, exact whatever the decays (a reference inside the block would bound
its factors only under a bounded gate).
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.blocks.entry import Sequences, kernel_entry
from tileops.kernels.blocks.solve_tril import upper_clear, wy_solve
from tileops.kernels.blocks.transforms import LOG_DECAY_FLOOR, channel_gate_transform, row_rnorm
from tileops.kernels.blocks.wy_merge import BLOCK, SCRATCH_LD, SOURCE
from tileops.kernels.hardware import WARPGROUP
from tileops.kernels.plans.tiles import PAD, ROW_PAD

PAIRS = BLOCK // 2  # the pairs of a block row one thread forms: two threads a row


def channel_prep_program(*, heads: int, value_heads: int, dim_k: int, chunk: int, dtype: str, sequences: str,
                         l2norm: bool, gate_in_kernel: bool, beta_sigmoid: bool, neg_eigval: bool, scale: float,
                         lower_bound=None, delta: bool = True):
    """The TileLang program of the first pass, specialised on everything but lengths and counts.

    Arguments: q, k, g [tokens, HV, K], beta, a_log [HV], dt_bias [HV · K], then the tables of
    ``sequences`` (equal or packed: ``blocks.entry``), then the outputs ``tp`` and ``m_out``
    [HV, tokens, C], ``qo``, ``kx`` and ``ks`` [HV, tokens, K] in the input dtype and ``decay``
    [HV, W + N, K] in fp32; g, beta, A_log and dt_bias in fp32 (A_log and dt_bias are read with
    ``gate_in_kernel`` only; zeros stand in for an absent dt_bias). ``lower_bound``: the in-kernel
    gate's bound (``channel_gate_transform``). Without ``delta``: inputs q, k and g, outputs
    ``m_out``, ``qo``, ``ks`` and ``decay``. Grid: (HV, ceil(tokens / C)), one warpgroup each.
    """
    H, HV, K, C = heads, value_heads, dim_k, chunk
    assert C == 4 * BLOCK and K <= WARPGROUP, "four 16-row blocks a chunk; a thread per key channel"
    group = HV // H
    accum, operand = "float32", "float16"
    tokens = T.dynamic("tokens")
    decay_rows = T.dynamic("decay_rows")
    seqs = Sequences(sequences, HV, with_state=False, tokens=tokens)
    nseq = seqs.nseq
    varlen = sequences == "packed"
    assert delta or not (gate_in_kernel or beta_sigmoid or neg_eigval), "without the delta rule: no β, no gate transform"
    inputs = [("q", T.Tensor([tokens, H, K], dtype)), ("k", T.Tensor([tokens, H, K], dtype)),
              ("g", T.Tensor([tokens, HV, K], accum))]
    if delta:
        inputs += [("beta", T.Tensor([tokens, HV], accum)), ("a_log", T.Tensor([HV], accum)),
                   ("dt_bias", T.Tensor([HV * K], accum))]
    outputs = [("tp", T.Tensor([HV, tokens, C], dtype)), ("m_out", T.Tensor([HV, tokens, C], dtype)),
               ("qo", T.Tensor([HV, tokens, K], dtype)), ("kx", T.Tensor([HV, tokens, K], dtype)),
               ("ks", T.Tensor([HV, tokens, K], dtype)), ("decay", T.Tensor([HV, decay_rows, K], accum))]
    if not delta:  # no T' and no K_x
        outputs = [outputs[1], outputs[2], outputs[4], outputs[5]]

    rnorm = row_rnorm(C, K)
    solve = wy_solve(C, dtype)
    clear = upper_clear(C)

    @T.macro
    def rows(g, beta, a_log, dt_bias, bounds, gam_s, b_s, seg_s, beg_s, end_s, last_s, hv, t0, tx):
        """Per row: its sequence, the sequence's first and last row in the window, whether it is the
        sequence's last token, and β; per (row, channel) the log decay, transformed as the flags say
        and no lower than LOG_DECAY_FLOOR (zero outside the sequences), into ``gam_s`` [K, C]."""
        seg = T.alloc_var("int32")
        s_beg = T.alloc_var("int32")
        s_end = T.alloc_var("int32")
        if tx < C:
            t = t0 + tx
            if varlen:  # the sequence holding token t: a binary search of cu_seqlens
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
            inside = t < s_end and t < tokens and s_beg <= t
            seg_s[tx] = T.if_then_else(inside, seg, -1 - tx)  # rows outside meet no other row
            beg_s[tx] = T.max(s_beg - t0, 0)
            end_s[tx] = T.max(T.min(s_end - t0, C) - 1, 0)
            last_s[tx] = T.if_then_else(inside and t == s_end - 1, seg, -1)
            if delta:
                raw_b = T.if_then_else(inside, beta[T.min(t, tokens - 1), hv], 0.0)
                if beta_sigmoid:
                    b_s[tx] = T.if_then_else(inside, T.sigmoid(raw_b) * (2.0 if neg_eigval else 1.0), 0.0)
                else:
                    b_s[tx] = raw_b
        for c, i in T.Parallel(K, C):
            raw = g[T.min(t0 + i, tokens - 1), hv, c]
            log_decay = channel_gate_transform(raw + dt_bias[hv * K + c], a_log[hv], lower_bound) if gate_in_kernel else raw
            gam_s[c, i] = T.if_then_else(seg_s[i] >= 0, T.max(log_decay, LOG_DECAY_FLOOR), 0.0)

    @T.macro
    def scan(gam_s, beg_s, last_s, decay, hv, w, tx):
        """γ: each channel's running sum down the window, restarting at each sequence's first row;
        on the way, the state's decay over each segment: at a sequence's last token into its row
        W + n of ``decay``, at the window's last row into row w."""
        run = T.alloc_var(accum)
        if tx < K:
            run = 0.0
            for i in T.serial(C):
                run = T.if_then_else(beg_s[i] == i, 0.0, run) + gam_s[tx, i]
                gam_s[tx, i] = run
                if last_s[i] >= 0:
                    decay[hv, T.ceildiv(tokens, C) + last_s[i], tx] = T.exp(run)
            decay[hv, w, tx] = T.exp(gam_s[tx, T.min(tokens - w * C, C) - 1])

    @T.macro
    def block_pairs(qt_s, kt_s, gam_s, a_s, d_s, tx):
        """The pairs inside each 16-row block, one by one in fp32: Σ_c k_ic k_jc e^{γ_ic − γ_jc}
        into ``a_s`` and Σ_c q_ic k_jc e^{γ_ic − γ_jc} into ``d_s`` (every entry of the block; the
        caller keeps j ≤ i of one sequence). Two threads a row, PAIRS columns each."""
        acc_a = T.alloc_local([PAIRS], accum)
        acc_m = T.alloc_local([PAIRS], accum)
        i = tx // 2
        base = i // BLOCK * BLOCK + tx % 2
        for u in T.unroll(PAIRS, explicit=True):
            acc_a[u] = 0.0
            acc_m[u] = 0.0
        for c in T.serial(K):
            gi = gam_s[c, i]
            ki = T.cast(kt_s[c, i], accum)
            qi = T.cast(qt_s[c, i], accum)
            for u in T.unroll(PAIRS, explicit=True):
                # Above the diagonal or across sequences the exponent may be large: those entries
                # are dropped by the caller, never multiplied by a kept one.
                kj = T.cast(kt_s[c, base + 2 * u], accum) * T.exp(gi - gam_s[c, base + 2 * u])
                if delta:
                    acc_a[u] = acc_a[u] + ki * kj
                acc_m[u] = acc_m[u] + qi * kj
        for u in T.unroll(PAIRS, explicit=True):
            if delta:
                a_s[i, base + 2 * u] = acc_a[u]
            d_s[i, base + 2 * u] = acc_m[u]

    @T.macro
    def earlier_blocks(q_s, k_s, gam_s, seg_s, lq_s, lk_s, rk_s, a_f, m_f):
        """Each block's rows against the rows before it, about its first row: K Kᵀ into ``a_f``
        and Q Kᵀ into ``m_f`` (zero on and above the diagonal blocks)."""
        for blk in range(1, C // BLOCK):  # traced once per block: r and the first product's clear are constants
            r = blk * BLOCK
            for i, c in T.Parallel(C, K):
                own = i // BLOCK == blk and seg_s[i] == seg_s[r]
                before = i < r and seg_s[i] == seg_s[r]
                # At most 1 where kept; where dropped they may overflow, and are never multiplied.
                down = T.exp(gam_s[c, i] - gam_s[c, r])
                up = T.exp(gam_s[c, r] - gam_s[c, i])
                if delta:
                    lk_s[i, c] = T.cast(T.if_then_else(own, T.cast(k_s[i, c], accum) * down, 0.0), operand)
                lq_s[i, c] = T.cast(T.if_then_else(own, T.cast(q_s[i, c], accum) * down, 0.0), operand)
                rk_s[i, c] = T.cast(T.if_then_else(before, T.cast(k_s[i, c], accum) * up, 0.0), operand)
            if delta:
                T.gemm(lk_s, rk_s, a_f, transpose_B=True, clear_accum=blk == 1)
            T.gemm(lq_s, rk_s, m_f, transpose_B=True, clear_accum=blk == 1)

    @T.macro
    def solve_window(q, k, g, beta, a_log, dt_bias, bounds, tp, m_out, qo, kx, ks, decay, hv, w):
        h = hv // group
        t0 = w * C
        q_s = T.alloc_shared([C, K], dtype)
        k_s = T.alloc_shared([C, K], dtype)
        qt_s = T.alloc_shared([K, C], dtype)
        kt_s = T.alloc_shared([K, C], dtype)
        gam_s = T.alloc_shared([K, C + 1], accum)  # γ by channel: a thread's scan down a row hits its own bank
        lq_s = T.alloc_shared([C, K], operand)
        rk_s = T.alloc_shared([C, K], operand)
        m_f = T.alloc_fragment([C, C], accum)
        d_s = T.alloc_shared([C, C + PAD], accum)
        m_s = T.alloc_shared([C, C + ROW_PAD], dtype)
        lk_s = a_f = a_s = w_s = b_s = None  # the delta rule's A, its solve and β
        if delta:
            lk_s = T.alloc_shared([C, K], operand)
            a_f = T.alloc_fragment([C, C], accum)
            a_s = T.alloc_shared([C, C + PAD], accum)
            w_s = T.alloc_shared([4 * BLOCK, SCRATCH_LD], accum)
            b_s = T.alloc_shared([C], accum)
        rk_n = T.alloc_shared([C], accum)
        rq_n = T.alloc_shared([C], accum)
        seg_s = T.alloc_shared([C], "int32")
        beg_s = T.alloc_shared([C], "int32")
        end_s = T.alloc_shared([C], "int32")
        last_s = T.alloc_shared([C], "int32")
        tx = T.get_thread_binding()

        T.copy(k[t0:t0 + C, h, :], k_s)
        T.copy(q[t0:t0 + C, h, :], q_s)
        rows(g, beta, a_log, dt_bias, bounds, gam_s, b_s, seg_s, beg_s, end_s, last_s, hv, t0, tx)
        if l2norm:
            rnorm(k_s, rk_n)
            rnorm(q_s, rq_n)
        else:
            for i in T.Parallel(C):
                rk_n[i] = 1.0
                rq_n[i] = 1.0
        for c, i in T.Parallel(K, C):
            kt_s[c, i] = k_s[i, c]
            qt_s[c, i] = q_s[i, c]
        scan(gam_s, beg_s, last_s, decay, hv, w, tx)
        earlier_blocks(q_s, k_s, gam_s, seg_s, lq_s, lk_s, rk_s, a_f, m_f)
        block_pairs(qt_s, kt_s, gam_s, a_s, d_s, tx)
        for i, j in T.Parallel(C, C):
            pair = seg_s[i] == seg_s[j]
            inner = i // BLOCK == j // BLOCK  # outside the diagonal blocks a_s and d_s hold nothing
            if delta:
                a_sum = a_f[i, j] + T.if_then_else(inner, a_s[i, j], 0.0)
            m_sum = m_f[i, j] + T.if_then_else(inner, d_s[i, j], 0.0)
            if delta:
                a_s[i, j] = T.if_then_else(j < i and pair, b_s[i] * rk_n[i] * rk_n[j] * a_sum, 0.0)
            m_s[i, j] = T.if_then_else(j <= i and pair, scale * rq_n[i] * rk_n[j] * m_sum, 0.0)
        for i, j in T.Parallel(C, C):
            if t0 + i < tokens:
                m_out[hv, t0 + i, j] = m_s[i, j]
        if delta:
            clear(d_s)
            solve(a_s, d_s, w_s, tx)
            for i, j in T.Parallel(C, C):
                if t0 + i < tokens:
                    tp[hv, t0 + i, j] = d_s[i, j] * b_s[j]
        for i, c in T.Parallel(C, K):
            if t0 + i < tokens:
                from_start = T.exp(gam_s[c, i])
                qo[hv, t0 + i, c] = scale * rq_n[i] * T.cast(q_s[i, c], accum) * from_start
                if delta:
                    kx[hv, t0 + i, c] = rk_n[i] * T.cast(k_s[i, c], accum) * from_start
                ks[hv, t0 + i, c] = rk_n[i] * T.cast(k_s[i, c], accum) * T.exp(gam_s[c, end_s[i]] - gam_s[c, i])

    @T.macro
    def grid(q, k, g, beta, a_log, dt_bias, tp, m_out, qo, kx, ks, decay, seqs):
        with T.Kernel(HV, T.ceildiv(tokens, C), threads=WARPGROUP, prelude=SOURCE) as (hv, w):
            solve_window(q, k, g, beta, a_log, dt_bias, seqs.bounds, tp, m_out, qo, kx, ks, decay, hv, w)

    def launch(*args):
        """The entry's arguments, with None for what a call without the delta rule lacks."""
        if delta:
            return grid(*args)
        q, k, g, m_out, qo, ks, decay, seqs = args
        return grid(q, k, g, None, None, None, None, m_out, qo, None, ks, decay, seqs)

    return kernel_entry("prep_channel", seqs, inputs, outputs, launch)

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
formed one by one in fp32, the lower triangle only, exact whatever the decays (a reference inside
the block would bound its factors only under a bounded gate).
"""

import math

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.blocks.entry import Sequences, kernel_entry
from tileops.kernels.blocks.solve_tril import upper_clear, wy_solve
from tileops.kernels.blocks.transforms import LOG_DECAY_FLOOR, channel_gate_transform, row_rnorm
from tileops.kernels.blocks.wy_merge import BLOCK, SCRATCH_LD, SOURCE
from tileops.kernels.hardware import WARP, WARPGROUP
from tileops.kernels.plans.tiles import PAD, ROW_PAD

SLOTS = BLOCK - 1  # the pairs below the diagonal of a block's rows p and 15 − p, formed by one thread
QUARTERS = 4  # threads sharing those rows, a quarter of the channels each
SKEW = 8  # the quarters walk their channels from offsets SKEW apart, so that a warp's loads of γ
# and k meet few bank conflicts (1.4 ways on average, against 3.5 with interleaved channels)
ODD_ROW = 2  # elements padding each row of the q and k tiles: a row of 65 words puts the 16 rows
# that a warp reads in one channel in 16 banks
LOG2_E = math.log2(math.e)  # γ is kept in base 2: each gate factor is one exp2
HALVES = 2  # warpgroups a window, two windows an SM: the pass waits on latency, which twice the
# warps hide (docs/kda-gated-products.md, "Two warpgroups a window")


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
    ``m_out``, ``qo``, ``ks`` and ``decay``. Grid: (HV, ceil(tokens / C)), HALVES warpgroups each:
    each forms the in-block pairs over half the channels, and the first alone runs the solve.
    """
    H, HV, K, C = heads, value_heads, dim_k, chunk
    assert C == 4 * BLOCK and K <= WARPGROUP, "four 16-row blocks a chunk; a thread per key channel"
    assert QUARTERS * BLOCK // 2 == WARP and C // BLOCK * WARP == WARPGROUP, "a warp a block, a lane a quarter row pair"
    span = K // QUARTERS // HALVES  # the channels of one thread's pairs
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
        and no lower than LOG_DECAY_FLOOR (zero outside the sequences), into ``gam_s`` [K, C] in base
        2: every factor the pass forms is then one exp2."""
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
        # All loads at once into registers: loaded inside the loop below, each load sat under the
        # row's test and was waited on in turn.
        g_f = T.alloc_fragment([C, K], accum)
        T.copy(g[t0:t0 + C, hv, :], g_f)
        for i, c in T.Parallel(C, K):
            raw = g_f[i, c]
            log_decay = channel_gate_transform(raw + dt_bias[hv * K + c], a_log[hv], lower_bound) if gate_in_kernel else raw
            gam_s[c, i] = T.if_then_else(seg_s[i] >= 0, T.max(log_decay, LOG_DECAY_FLOOR) * LOG2_E, 0.0)

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
                    decay[hv, T.ceildiv(tokens, C) + last_s[i], tx] = T.exp2(run)
            decay[hv, w, tx] = T.exp2(gam_s[tx, T.min(tokens - w * C, C) - 1])

    @T.macro
    def store_pairs(acc_a, acc_m, a_s, d_s, lo, hi, blk, p, quarter, mirror):
        """A thread's pair sums into ``a_s`` and ``d_s``; where ``mirror`` holds, at (j, i) instead of
        (i, j) (the diagonal blocks' upper triangles, which hold nothing) and the diagonal into the
        padding column C (an expression: both warpgroups store in one flow, the barriers TileLang
        places between the stores reach every thread)."""
        for u in T.unroll(SLOTS, explicit=True):
            if u % QUARTERS == quarter:
                first = u < p
                i = T.if_then_else(first, lo, hi)
                j = blk * BLOCK + T.if_then_else(first, u, u - p)
                i, j = T.if_then_else(mirror, j, i), T.if_then_else(mirror, i, j)
                if delta:
                    a_s[i, j] = acc_a[u]
                d_s[i, j] = acc_m[u]
        if quarter == 0:
            d_s[lo, T.if_then_else(mirror, C, lo)] = acc_m[SLOTS]
            d_s[hi, T.if_then_else(mirror, C, hi)] = acc_m[SLOTS + 1]

    @T.macro
    def block_pairs(q_s, k_s, gam_s, a_s, d_s, tx):
        """The pairs inside each 16-row block, one by one in fp32, the lower triangle only:
        Σ_c k_ic k_jc e^{γ_ic − γ_jc} into ``a_s`` (j < i) and Σ_c q_ic k_jc e^{γ_ic − γ_jc} into
        ``d_s`` (j ≤ i; the caller keeps the pairs of one sequence). Rows p and 15 − p of a block
        hold p + (15 − p) pairs below the diagonal, so every thread forms the same SLOTS of them,
        over a quarter of the channels; shuffles sum the quarters. A warp takes one block, its
        lanes the eight row pairs times the four quarters; with two warpgroups, each takes every
        block over half the channels, and the second stores its sums mirrored (``store_pairs``)."""
        acc_a = T.alloc_local([SLOTS], accum)
        acc_m = T.alloc_local([SLOTS + 2], accum)  # and the two rows' diagonal entries
        quarter = tx % QUARTERS
        half = tx // WARPGROUP
        blk = tx % WARPGROUP // WARP
        p = tx % WARP // QUARTERS
        lo = blk * BLOCK + p
        hi = blk * BLOCK + BLOCK - 1 - p
        for u in T.unroll(SLOTS + 2, explicit=True):
            acc_m[u] = 0.0
        if delta:
            for u in T.unroll(SLOTS, explicit=True):
                acc_a[u] = 0.0
        for m in T.serial(span):
            # quarter q takes channels q · span on in its half: a lane's bank stays q · span + m + row
            c = half * (K // 2) + quarter * span + (m + SKEW * (quarter // 2)) % span
            g_lo = gam_s[c, lo]
            g_hi = gam_s[c, hi]
            k_lo = T.cast(k_s[lo, c], accum)
            k_hi = T.cast(k_s[hi, c], accum)
            q_lo = T.cast(q_s[lo, c], accum)
            q_hi = T.cast(q_s[hi, c], accum)
            acc_m[SLOTS] = acc_m[SLOTS] + q_lo * k_lo
            acc_m[SLOTS + 1] = acc_m[SLOTS + 1] + q_hi * k_hi
            for u in T.unroll(SLOTS, explicit=True):  # slot u: row lo's column u, or row hi's column u − p
                first = u < p
                j = blk * BLOCK + T.if_then_else(first, u, u - p)
                # Across sequences the exponent may be large: the caller drops those entries.
                kj = T.cast(k_s[j, c], accum) * T.exp2(T.if_then_else(first, g_lo, g_hi) - gam_s[c, j])
                if delta:
                    acc_a[u] = acc_a[u] + T.if_then_else(first, k_lo, k_hi) * kj
                acc_m[u] = acc_m[u] + T.if_then_else(first, q_lo, q_hi) * kj
        for u in T.unroll(SLOTS + 2, explicit=True):
            for d in T.unroll(2, explicit=True):
                acc_m[u] = acc_m[u] + T.shfl_xor(acc_m[u], 1 << d)
        if delta:
            for u in T.unroll(SLOTS, explicit=True):
                for d in T.unroll(2, explicit=True):
                    acc_a[u] = acc_a[u] + T.shfl_xor(acc_a[u], 1 << d)
        # the second half's sums mirrored, for the caller to add (``both_halves``)
        store_pairs(acc_a, acc_m, a_s, d_s, lo, hi, blk, p, quarter, half == 1)

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
    def fold(x_s, gam_s, seg_s, left_s, blk):
        """Block ``blk``'s rows of x (of r's sequence) times e^{γ − γ_r} into its rows of ``left_s``."""
        r = blk * BLOCK
        for i, c in T.Parallel(BLOCK, K):
            own = seg_s[r + i] == seg_s[r]
            left_s[r + i, c] = T.cast(T.if_then_else(own, T.cast(x_s[r + i, c], accum) * T.exp2(gam_s[c, r + i] - gam_s[c, r]),
                                                     0.0), operand)

    @T.macro
    def earlier_blocks(q_s, k_s, gam_s, seg_s, left_s, rk_s, a_f, m_f):
        """Each block's rows against the rows before it, about its first row: K Kᵀ into ``a_f``
        and Q Kᵀ into ``m_f`` (zero on and above the diagonal blocks). One left operand tile
        serves K's product, then Q's; each factor is formed only where it is kept, where it is at
        most 1 (elsewhere the exponent may overflow). Only the rows that hold something are
        written: the rows before r on the right (those after it stay zero), block I's on the left
        (the block before it zeroed)."""
        T.clear(left_s)
        T.clear(rk_s)
        for blk in range(1, C // BLOCK):  # traced once per block: r and the first product's clear are constants
            r = blk * BLOCK
            for i, c in T.Parallel(r, K):
                before = seg_s[i] == seg_s[r]
                rk_s[i, c] = T.cast(T.if_then_else(before, T.cast(k_s[i, c], accum) * T.exp2(gam_s[c, r] - gam_s[c, i]),
                                                   0.0), operand)
            if blk > 1:
                for i, c in T.Parallel(BLOCK, K):
                    left_s[r - BLOCK + i, c] = T.cast(0.0, operand)
            if delta:
                fold(k_s, gam_s, seg_s, left_s, blk)
                T.gemm(left_s, rk_s, a_f, transpose_B=True, clear_accum=blk == 1)
            fold(q_s, gam_s, seg_s, left_s, blk)
            T.gemm(left_s, rk_s, m_f, transpose_B=True, clear_accum=blk == 1)

    @T.macro
    def decayed_operands(q_s, k_s, gam_s, rq_n, rk_n, end_s, qo, kx, ks, hv, t0):
        """Q_o, K_s and (with the delta rule) K_x into their outputs. Without the delta rule Q_o is
        formed in place of the q tile and copied out whole (stored one by one, every element took
        a 64-bit address of its own); KDA's pass, held to 128 registers, ran slower so and stores
        its three one by one, their factors shared (docs/kda-gated-products.md). K_s is stored one
        by one either way: its decay's row is read at an index the barrier planner cannot see,
        which puts a barrier in every step of a loop that writes shared memory."""
        if delta:
            for i, c in T.Parallel(C, K):
                if t0 + i < tokens:
                    from_start = T.exp2(gam_s[c, i])
                    qo[hv, t0 + i, c] = scale * rq_n[i] * T.cast(q_s[i, c], accum) * from_start
                    kx[hv, t0 + i, c] = rk_n[i] * T.cast(k_s[i, c], accum) * from_start
                    ks[hv, t0 + i, c] = rk_n[i] * T.cast(k_s[i, c], accum) * T.exp2(gam_s[c, end_s[i]] - gam_s[c, i])
        else:
            for i, c in T.Parallel(C, K):
                if t0 + i < tokens:
                    ks[hv, t0 + i, c] = rk_n[i] * T.cast(k_s[i, c], accum) * T.exp2(gam_s[c, end_s[i]] - gam_s[c, i])
            for i, c in T.Parallel(C, K):  # one statement: each thread rewrites what it read
                q_s[i, c] = scale * rq_n[i] * T.cast(q_s[i, c], accum) * T.exp2(gam_s[c, i])
            T.copy(q_s[0:C, 0:K], qo[hv, t0:t0 + C, :], disable_tma=True)  # a padded tile: no bulk copy

    @T.macro
    def solve_window(q, k, g, beta, a_log, dt_bias, bounds, tp, m_out, qo, kx, ks, decay, hv, w):
        h = hv // group
        t0 = w * C
        q_s = T.alloc_shared([C, K + ODD_ROW], dtype)
        k_s = T.alloc_shared([C, K + ODD_ROW], dtype)
        gam_s = T.alloc_shared([K, C + 1], accum)  # γ by channel: a thread's scan down a row hits its own bank
        left_s = T.alloc_shared([C, K], operand)
        rk_s = T.alloc_shared([C, K], operand)
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
        beg_s = T.alloc_shared([C], "int32")
        end_s = T.alloc_shared([C], "int32")
        last_s = T.alloc_shared([C], "int32")
        tx = T.get_thread_binding()

        T.copy(k[t0:t0 + C, h, :], k_s[0:C, 0:K])
        T.copy(q[t0:t0 + C, h, :], q_s[0:C, 0:K])
        rows(g, beta, a_log, dt_bias, bounds, gam_s, b_s, seg_s, beg_s, end_s, last_s, hv, t0, tx)
        if l2norm:
            rnorm(k_s[0:C, 0:K], rk_n)
            rnorm(q_s[0:C, 0:K], rq_n)
        else:
            for i in T.Parallel(C):
                rk_n[i] = 1.0
                rq_n[i] = 1.0
        scan(gam_s, beg_s, last_s, decay, hv, w, tx)
        earlier_blocks(q_s, k_s, gam_s, seg_s, left_s, rk_s, a_f, m_f)
        block_pairs(q_s, k_s, gam_s, a_s, d_s, tx)
        both_halves(a_s, d_s, a_f, m_f)
        for i, j in T.Parallel(C, C):
            pair = seg_s[i] == seg_s[j]
            if delta:
                a_s[i, j] = T.if_then_else(j < i and pair, b_s[i] * rk_n[i] * rk_n[j] * a_f[i, j], 0.0)
            m_s[i, j] = T.if_then_else(j <= i and pair, scale * rq_n[i] * rk_n[j] * m_f[i, j], 0.0)
        for i, j in T.Parallel(C, C):
            if t0 + i < tokens:
                m_out[hv, t0 + i, j] = m_s[i, j]
        # Before the solve, so that its scratch may take the q, k and γ tiles' place.
        decayed_operands(q_s, k_s, gam_s, rq_n, rk_n, end_s, qo, kx, ks, hv, t0)
        if delta:
            clear(d_s)
            T.sync_threads()  # the merge's barriers count one warpgroup
            if tx < WARPGROUP:
                solve(a_s, d_s, w_s, tx)
            T.sync_threads()
            for i, j in T.Parallel(C, C):
                if t0 + i < tokens:
                    tp[hv, t0 + i, j] = d_s[i, j] * b_s[j]

    @T.macro
    def grid(q, k, g, beta, a_log, dt_bias, tp, m_out, qo, kx, ks, decay, seqs):
        with T.Kernel(HV, T.ceildiv(tokens, C), threads=HALVES * WARPGROUP, prelude=SOURCE) as (hv, w):
            T.annotate_min_blocks_per_sm(2)  # at most 128 registers a thread
            solve_window(q, k, g, beta, a_log, dt_bias, seqs.bounds, tp, m_out, qo, kx, ks, decay, hv, w)

    def launch(*args):
        """The entry's arguments, with None for what a call without the delta rule lacks."""
        if delta:
            return grid(*args)
        q, k, g, m_out, qo, ks, decay, seqs = args
        return grid(q, k, g, None, None, None, None, m_out, qo, None, ks, decay, seqs)

    return kernel_entry("prep_channel", seqs, inputs, outputs, launch)

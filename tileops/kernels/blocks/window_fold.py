"""The gated products of a window in one fold (KDA, GLA): Q Kᵀ and K Kᵀ over the C rows, each pair
(i, j) carrying Σ_c x_ic k_jc 2^{γ_ic − γ_jc}, γ the cumulative log decay in base 2.

About each channel's midpoint ρ of γ over the window the factor splits into 2^{γ_i − ρ} on the
left operand and 2^{ρ − γ_j} on the right (any constant per channel cancels), both within
2^{±FOLD_REACH} where the channel's half-span allows it. Each operand goes to the tensor cores in
two bf16 parts, its rounding and the rest rounded: hi·hi + lo·hi + hi·lo keeps each term to about
2^-16 of itself. A kept pair (j ≤ i, one sequence) has γ_j ≥ γ_i, so its term is at most |x_i k_j|;
the terms above the diagonal or across sequences may overflow and are the caller's masks to drop
(docs/kda-gated-products.md).
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.hardware import WARP

FOLD_REACH = 100  # the largest half-span of a channel's γ (base 2) that the fold takes: every operand
# then stays within 2^{±100} of its input, finite for inputs below 2^27 (the fp16 operands of the
# blocks' form overflow past 2^16)
VEC = 8  # elements a thread forms and stores in one go: 16 bytes of the 16-bit operands
ROWS_A_WARP = 8  # rows a warp's lanes take in those loops, 4 channel groups each: their reads of γ fall in 32 banks


def lane_group(tx, groups: int):
    """The first of thread ``tx``'s VEC channels in a row of ``groups`` channel groups: a warp's
    lanes take ROWS_A_WARP rows and WARP / ROWS_A_WARP groups, the warps the groups in turn; the
    same in every item a thread takes."""
    return (tx % WARP // ROWS_A_WARP + WARP // ROWS_A_WARP * (tx // WARP % (groups // (WARP // ROWS_A_WARP)))) * VEC


def window_fold(chunk: int, dim_k: int, threads: int, delta: bool):
    """A macro for ``threads`` threads (``tx``) that forms Q Kᵀ into ``m_f`` and, with ``delta``,
    K Kᵀ into ``a_f`` from the q and k tiles, γ by channel ([K, C] in ``gam_s``), each channel's
    ρ (``rho_s``) and the rows' sequences (``seg_s``, negative outside), in four [C, K / 2] bf16
    tiles; the caller syncs before."""
    C, K, THREADS = chunk, dim_k, threads
    accum = "float32"
    GROUPS = K // 2 // VEC  # channel groups of a row's half
    assert THREADS % WARP == 0 and C * GROUPS % THREADS == 0

    @T.macro
    def scaled_parts(dst_hi, dst_lo, x_s, e_l, x_l, i, c0, g0, inside, left):
        """Row i's VEC channels c0 + g0 .. of x ⊙ 2^{±e} (``left``: +), zero outside the sequences,
        into ``x_l`` in fp32, its rounding to bf16 into ``dst_hi`` and the rest's into ``dst_lo``, 16
        bytes a tile."""
        xv_l = T.alloc_local([VEC], x_s.dtype)
        hi_l = T.alloc_local([VEC], "bfloat16")
        for v in T.vectorized(VEC):
            xv_l[v] = x_s[i, c0 + g0 + v]
        for v in T.unroll(VEC, explicit=True):
            x_l[v] = T.if_then_else(inside, T.cast(xv_l[v], accum) * T.exp2(e_l[v] if left else -e_l[v]), 0.0)
            hi_l[v] = T.cast(x_l[v], "bfloat16")
        for v in T.vectorized(VEC):
            dst_hi[i, g0 + v] = hi_l[v]
        for v in T.vectorized(VEC):
            dst_lo[i, g0 + v] = T.cast(x_l[v] - T.cast(hi_l[v], accum), "bfloat16")

    @T.macro
    def split_fill(hi_s, lo_s, x_s, khi_s, klo_s, k_s, gam_s, rho_l, up_l, seg_s, c0, tx, emit):
        """Channels c0 .. c0 + K / 2 − 1 of x ⊙ 2^{γ − ρ} into ``hi_s`` and ``lo_s`` and, given
        ``k_s``, of k ⊙ 2^{ρ − γ} into ``khi_s`` and ``klo_s``, each in two bf16 parts, rows outside
        the sequences zero; then, given ``emit``, both operands' fp32 values to it. γ is read once for
        both operands, ρ (``rho_l``: the thread's VEC channels) once by the caller. As the first
        pass's ``scaled_rows``, a thread forms VEC channels of a row and stores 16 bytes a tile; a
        warp's lanes take 8 rows and 4 channel groups, whose reads of γ fall in 32 banks."""
        e_l = T.alloc_local([VEC], accum)
        x_l = T.alloc_local([VEC], accum)
        k_l = T.alloc_local([VEC], accum)
        g0 = lane_group(tx, GROUPS)
        for it in T.unroll(C * GROUPS // THREADS):
            i = (it * THREADS + tx) // (GROUPS * ROWS_A_WARP) * ROWS_A_WARP + tx % ROWS_A_WARP
            inside = seg_s[i] >= 0
            for v in T.unroll(VEC, explicit=True):
                e_l[v] = gam_s[c0 + g0 + v, i] - rho_l[v]
            scaled_parts(hi_s, lo_s, x_s, e_l, x_l, i, c0, g0, inside, True)
            if k_s is not None:
                scaled_parts(khi_s, klo_s, k_s, e_l, k_l, i, c0, g0, inside, False)
            if emit is not None:
                emit(i, c0 + g0, x_l, k_l, rho_l, up_l)

    @T.macro
    def split_products(hi_s, lo_s, khi_s, klo_s, acc, first):
        """acc (+)= hi·khiᵀ + lo·khiᵀ + hi·kloᵀ: each term to about 2^-16 of itself."""
        T.gemm(hi_s, khi_s, acc, transpose_B=True, clear_accum=first)
        T.gemm(lo_s, khi_s, acc, transpose_B=True)
        T.gemm(hi_s, klo_s, acc, transpose_B=True)

    @T.macro
    def fold(q_s, k_s, gam_s, rho_s, seg_s, hi_s, lo_s, khi_s, klo_s, a_f, m_f, tx, emit):
        """Q Kᵀ into ``m_f`` and (with the delta rule) K Kᵀ into ``a_f`` over the whole window in one
        fold: x̃_i = x_i ⊙ 2^{γ_i − ρ} against k̃_j = k_j ⊙ 2^{ρ − γ_j}, ρ each channel's midpoint
        (any constant per channel cancels), every factor within 2^{±FOLD_REACH}; half of the
        channels at a time, so that the four bf16 tiles take the earlier blocks' shared memory.
        Entries above the diagonal or across sequences may overflow: the caller's masks drop them.
        ``emit`` (or None) takes each row's q̃ and k̃ in fp32 as Q Kᵀ's fill forms them:
        ``emit(i, c, q̃_l, k̃_l, ρ_l, 2^ρ_l)`` for row i's VEC channels from c."""
        rho_l = T.alloc_local([VEC], accum)
        up_l = None
        if emit is not None:
            up_l = T.alloc_local([VEC], accum)
        for half in T.unroll(2):
            c0 = half * (K // 2)
            for v in T.unroll(VEC, explicit=True):
                rho_l[v] = rho_s[c0 + lane_group(tx, GROUPS) + v]
                if emit is not None:
                    up_l[v] = T.exp2(rho_l[v])
            split_fill(hi_s, lo_s, q_s, khi_s, klo_s, k_s, gam_s, rho_l, up_l, seg_s, c0, tx, emit)
            T.sync_threads()
            split_products(hi_s, lo_s, khi_s, klo_s, m_f, half == 0)
            if delta:
                T.sync_threads()
                split_fill(hi_s, lo_s, k_s, None, None, None, gam_s, rho_l, up_l, seg_s, c0, tx, None)
                T.sync_threads()
                split_products(hi_s, lo_s, khi_s, klo_s, a_f, half == 0)
            T.sync_threads()

    return fold

"""chunk_h, the state walk: one chunk of a value-major walk, Sᵀ (rows × K) in registers.

Every product of the chunk then takes its left operand from registers (wgmma's register-A
form), so the state, X and Δ never go through shared memory; only the output does, transposed
on its way to whole-row stores. One warpgroup per 64 value rows. With T', M and the row factors
of the first pass, per chunk (columns of the tiles are the chunk's tokens, those outside the
sequence masked):

    Xᵀ = Vᵀ − (Sᵀ Kᵀ) diag(f_x)        Δᵀ = Xᵀ T'ᵀ
    Oᵀ = (Sᵀ Qᵀ) diag(f_o) + Δᵀ Mᵀ
    Sᵀ = f_c Sᵀ + (Δᵀ diag(f_s)) K

Under one decay per key channel (KDA) no row factor can carry the decay: the first pass hands
the walk its keys and queries already decayed, K_x = K ⊙ e^γ, Q_o = scale · Q ⊙ e^γ and
K_s = K ⊙ e^{γ_end − γ}, and the decay of the state's columns d = e^{γ_end}:

    Xᵀ = Vᵀ − Sᵀ K_xᵀ        Δᵀ = Xᵀ T'ᵀ        Oᵀ = Sᵀ Q_oᵀ + Δᵀ Mᵀ        Sᵀ = Sᵀ diag(d) + Δᵀ K_s

and without the delta rule (GLA's plain gated sum) Δ is V itself: no K_x, no T', three products.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.blocks.walk_moves import matrix_moves

WARPGROUP_ROWS = 64  # value rows one warpgroup's wgmma covers
ROWS = T.GemmWarpPolicy.FullRow  # each warpgroup keeps its own value rows in every product


def walk_step(*, rows: int, dim_k: int, chunk: int, dtype: str, m_transposed: bool = False,
              moves: str = "elementwise", issue: str = "serial", masked: bool = True, outputs: bool = True,
              channel: bool = False, delta: bool = True):
    """Two macros of one chunk of a value-major walk over ``rows`` value rows, shared by the chain
    and the fused kernel: ``step`` (the products above, the state ``s_f`` updated in place and
    the output left in ``o_f``) and ``store_output`` (Oᵀ transposed through stage ``o_stage`` of
    the [S, C, ld] tiles ``o_s``, then rows lo..hi stored; with matrix moves the tiles may be the
    chunk's own V tiles).

    ``moves`` says how Vᵀ comes into registers and Oᵀ leaves them: ``"elementwise"`` through
    TileLang's own loads and stores (which synchronise the CTA around ``o_s``), ``"matrix"`` by
    ``walk_moves``' transposing matrix moves on tiles in the copy engine's swizzle, each warp
    storing its own columns. The matrix moves are opaque to TileLang's synchronisation, so they
    suit a kernel that orders the V tiles itself (the fused kernel), not a software-pipelined
    loop. ``"tma-output"``: Vᵀ elementwise, and Oᵀ through the tile to one TMA store of the whole
    chunk, issued by one thread and not waited for (the caller waits before it rewrites the tile),
    or row by row when the chunk is cut (hi < C: the rows past it may be another sequence's).

    ``issue`` says how the five products wait: ``"serial"`` each for itself, ``"paired"`` the two
    independent pairs (Sᵀ Kᵀ with Sᵀ Qᵀ, Δᵀ M with the state update) issued together with one
    wait each, so a chunk waits on the tensor cores three times instead of five.

    The chunk's tiles are stage ``s`` of ``q_s``, ``k_s`` and ``v_s`` and stage ``so`` of ``tp_s``,
    ``m_s`` and ``f_s`` (a tensor-core product takes a tile's part only along a leading
    dimension); columns outside lo..hi (the tokens outside the sequence) are masked, unless
    ``masked`` is off: a T' with zero rows and columns for those tokens (the fused first pass's,
    whose β is zero there) keeps them out of Δ by itself. The matrix moves take no mask. ``m_s``
    holds M, or Mᵀ with ``m_transposed``.

    ``channel``: the walk under one decay per key channel (above; elementwise moves): ``step``
    takes the decayed keys K_x in ``k_s``, those of the update K_s in ``ku_s`` after it, Q_o in
    ``q_s``, and in place of the row factors ``d_s`` [stages, K], the decay of the state's columns.
    Without ``delta`` (per-channel only) Δᵀ is Vᵀ: ``k_s`` and ``tp_s`` are not read. Without
    ``outputs`` (a cut piece's walk for its final state or its transition) neither are ``q_s`` and
    ``m_s``: the products with Q_o and M are left out.
    """
    BV, K, C = rows, dim_k, chunk
    accum = "float32"
    matrix = moves == "matrix"
    by_copy_engine = moves == "tma-output"
    paired = issue == "paired"
    assert not (matrix and masked), "the matrix moves take no mask"
    assert not (channel and matrix), "the per-channel walk moves elementwise"
    assert delta or channel, "only the per-channel walk goes without the delta rule"
    x_operand, output_rows = matrix_moves(dtype)

    def kept(value, j, lo, hi):
        """``value`` of token column j: zero outside lo..hi when the walk masks."""
        return T.if_then_else(T.And(lo <= j, j < hi), value, 0.0) if masked else value

    def values(v, with_v):
        """A V element, or 0 where ``with_v`` is false (the summary step only; the per-channel walk
        reads its V tile, zero for a transition, whatever its outputs)."""
        return v if outputs or channel else T.if_then_else(with_v, v, 0.0)

    @T.macro
    def fence(c):
        """No read of accumulator ``c`` moves above the wait before it (each thread holds half a row
        of it per 64 value rows)."""
        T.warpgroup_fence_operand(c, num_regs=c.shape[1] // 2)

    @T.macro
    def two_products(a1, b1, c1, a2, b2, c2, clear: bool, transpose1: bool, transpose2: bool):
        """c1 (+)= a1 b1 and c2 (+)= a2 b2 (b transposed as asked): one wait for both when paired."""
        if paired:
            T.wgmma_gemm(a1, b1, c1, transpose_B=transpose1, clear_accum=clear, policy=ROWS)
            T.wgmma_gemm(a2, b2, c2, transpose_B=transpose2, clear_accum=clear, policy=ROWS)
            T.wait_wgmma(0)
            fence(c1)
            fence(c2)
        else:
            T.gemm(a1, b1, c1, transpose_B=transpose1, clear_accum=clear, policy=ROWS)
            T.gemm(a2, b2, c2, transpose_B=transpose2, clear_accum=clear, policy=ROWS)

    @T.macro
    def build_x(x_a, ks_f, v_s, f_s, s, so, lo, hi, with_v):
        """Xᵀ = Vᵀ − (Sᵀ Kᵀ) diag(f_x), the A operand of Xᵀ T'ᵀ."""
        if matrix:
            x_operand(x_a, ks_f, v_s, f_s, s, so, T.get_thread_binding())
        else:
            for i, j in T.Parallel(BV, C):
                x_a[i, j] = kept(values(v_s[s, j, i], with_v) - (ks_f[i, j] if channel else f_s[so, 0, j] * ks_f[i, j]),
                                 j, lo, hi)

    @T.macro
    def channel_delta(d_f, d_a, lo, hi):
        """Δᵀ as the 16-bit A operand of both its products (the keys carry the decays)."""
        for i, j in T.Parallel(BV, C):
            d_a[i, j] = kept(d_f[i, j], j, lo, hi)

    @T.macro
    def delta_operands(d_f, d_a, dk_a, o_f, f_s, so, lo, hi):
        """Δᵀ and Δᵀ diag(f_s) as 16-bit A operands; Oᵀ's first term scaled by f_o."""
        for i, j in T.Parallel(BV, C):
            d_a[i, j] = kept(d_f[i, j], j, lo, hi)
            dk_a[i, j] = kept(d_f[i, j] * f_s[so, 2, j], j, lo, hi)
            if outputs:
                o_f[i, j] = o_f[i, j] * f_s[so, 1, j]

    @T.macro
    def decay_state(s_f, f_s, so, hi):
        """The state's decay over the chunk: f_c of its last row, or per column (``channel``)."""
        for i, j in T.Parallel(BV, K):
            s_f[i, j] = s_f[i, j] * (f_s[so, j] if channel else f_s[so, 3, hi - 1])

    @T.macro
    def carry(q_s, k_s, ku_s, v_s, tp_s, m_s, f_s, s, so, lo, hi, s_f, o_f, with_v):
        s_a = T.alloc_fragment([BV, K], dtype)
        ks_f = x_a = d_f = None  # X and Δ before its masks: the delta rule's
        if delta:
            ks_f = T.alloc_fragment([BV, C], accum)
            x_a = T.alloc_fragment([BV, C], dtype)
            d_f = T.alloc_fragment([BV, C], accum)
        d_a = T.alloc_fragment([BV, C], dtype)
        dk_a = d_a if channel else T.alloc_fragment([BV, C], dtype)  # the keys carry the decays
        T.copy(s_f, s_a)
        if not delta:  # Δᵀ is Vᵀ
            if outputs:
                T.gemm(s_a, q_s[s, :, :], o_f, transpose_B=True, clear_accum=True, policy=ROWS)
            for i, j in T.Parallel(BV, C):
                d_a[i, j] = kept(v_s[s, j, i], j, lo, hi)
        else:
            if outputs:
                two_products(s_a, k_s[s, :, :], ks_f, s_a, q_s[s, :, :], o_f, True, True, True)
            else:
                T.gemm(s_a, k_s[s, :, :], ks_f, transpose_B=True, clear_accum=True, policy=ROWS)
            build_x(x_a, ks_f, v_s, f_s, s, so, lo, hi, with_v)
            T.gemm(x_a, tp_s[so, :, :], d_f, transpose_B=True, clear_accum=True, policy=ROWS)
            if channel:
                channel_delta(d_f, d_a, lo, hi)
            else:
                delta_operands(d_f, d_a, dk_a, o_f, f_s, so, lo, hi)
        if not outputs:
            decay_state(s_f, f_s, so, hi)
            T.gemm(dk_a, ku_s[s, :, :], s_f, policy=ROWS)
        elif paired:
            decay_state(s_f, f_s, so, hi)
            two_products(d_a, m_s[so, :, :], o_f, dk_a, ku_s[s, :, :], s_f, False, not m_transposed, False)
        else:
            T.gemm(d_a, m_s[so, :, :], o_f, transpose_B=not m_transposed, policy=ROWS)
            decay_state(s_f, f_s, so, hi)
            T.gemm(dk_a, ku_s[s, :, :], s_f, policy=ROWS)

    @T.macro
    def step(q_s, k_s, v_s, tp_s, m_s, f_s, s, so, lo, hi, s_f, o_f):
        carry(q_s, k_s, k_s, v_s, tp_s, m_s, f_s, s, so, lo, hi, s_f, o_f, True)

    @T.macro
    def summary_step(q_s, k_s, v_s, tp_s, m_s, f_s, s, so, lo, hi, s_f, o_f, with_v):
        carry(q_s, k_s, k_s, v_s, tp_s, m_s, f_s, s, so, lo, hi, s_f, o_f, with_v)

    @T.macro
    def channel_step(q_s, k_s, ku_s, v_s, tp_s, m_s, d_s, s, so, lo, hi, s_f, o_f):
        carry(q_s, k_s, ku_s, v_s, tp_s, m_s, d_s, s, so, lo, hi, s_f, o_f, True)

    @T.macro
    def tile_rows(o_s, o_stage, o, t0, hv, v0, lo, hi):
        for i, j in T.Parallel(C, BV):
            if lo <= i and i < hi:
                o[t0 + i, hv, v0 + j] = o_s[o_stage, i, j]

    @T.macro
    def store_output(o_f, o_s, o_stage, o, t0, hv, v0, lo, hi):
        if matrix:
            output_rows(o_f, o_s, o_stage, o, t0, hv, v0, lo, hi, T.get_thread_binding())
        else:
            for i, j in T.Parallel(BV, C):
                o_s[o_stage, j, i] = o_f[i, j]
            if by_copy_engine:
                T.fence_proxy_async()  # the copy engine reads what these stores wrote
                if hi == C:
                    T.tma_copy(o_s[o_stage, :, :], o[t0:t0 + C, hv, v0:v0 + BV])
                else:
                    tile_rows(o_s, o_stage, o, t0, hv, v0, lo, hi)
            else:
                tile_rows(o_s, o_stage, o, t0, hv, v0, lo, hi)

    return (channel_step if channel else step if outputs else summary_step), store_output

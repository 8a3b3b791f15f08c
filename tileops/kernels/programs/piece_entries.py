"""The entry states of a cut sequence's pieces from their summaries (``plans.entries``).

Per cut sequence, value head and tile of BLOCK state columns, in the sequence's order:
S_1 = R_0 and S_{r+1} = Φ_r S_r + R_r, each written to row N + p of the entries (p the piece).
A (sequence, value head) none of whose pieces starts from an entry row (``warm_start`` found all
their warm-ups short) is skipped. The products are fp32 FMAs (a tensor-core product would round
the state to TF32 or 16 bits): a few K × K × BLOCK products per sequence, microseconds against
the walks around them.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

BLOCK = 32  # state columns a CTA carries
THREADS = 128


def piece_entries_program(*, value_heads: int, dim: int, state_v_first: bool):
    """The TileLang program: ``summaries`` [J, HV, D, D] (fp32, the state's layout: [.., V, K] with
    ``state_v_first``), the chains' ``chain_piece``, ``state_slot`` and ``transition_slot`` [Q, M]
    (``plans.entries``), the walk's rows [P, HV] and N, then ``entries`` [N + P, HV, D, D].
    Grid: (D / BLOCK, HV, Q)."""
    HV, D, BV = value_heads, dim, BLOCK
    f32 = "float32"
    jobs, rows, pieces = T.dynamic("jobs"), T.dynamic("rows"), T.dynamic("plan_pieces")
    chains, width = T.dynamic("chains"), T.dynamic("width")

    def state_at(x, slot, hv, k, j):
        """Element (k, v) of a stored state, v = j of the CTA's columns."""
        return x[slot, hv, j, k] if state_v_first else x[slot, hv, k, j]

    def transition_at(x, slot, hv, i, m):
        """Φ[i, m] of a stored transition (stored as its walk leaves a state: Φᵀ with ``state_v_first``)."""
        return x[slot, hv, m, i] if state_v_first else x[slot, hv, i, m]

    @T.macro
    def put(entries, row, hv, v0, s_s):
        for k, j in T.Parallel(D, BV):
            if state_v_first:
                entries[row, hv, v0 + j, k] = s_s[k, j]
            else:
                entries[row, hv, k, v0 + j] = s_s[k, j]

    @T.prim_func
    def piece_entries(
        summaries: T.Tensor([jobs, HV, D, D], f32),
        chain_piece: T.Tensor([chains, width], "int32"),
        state_slot: T.Tensor([chains, width], "int32"),
        transition_slot: T.Tensor([chains, width], "int32"),
        walk_rows: T.Tensor([pieces, HV], "int32"),
        sequences: T.int32,
        entries: T.Tensor([rows, HV, D, D], f32),
    ):
        with T.Kernel(D // BV, HV, chains, threads=THREADS) as (b, hv, c):
            phi_s = T.alloc_shared([D, D], f32)  # Φᵀ: a step's reads along a row are contiguous
            s_s = T.alloc_shared([D, BV], f32)
            acc = T.alloc_fragment([D, BV], f32)
            needed = T.alloc_var("int32")
            needed = 0
            for r in T.serial(width):
                if chain_piece[c, r] >= 0:
                    if walk_rows[chain_piece[c, r], hv] >= sequences:
                        needed = 1
            v0 = b * BV
            if needed > 0:
                for k, j in T.Parallel(D, BV):
                    s_s[k, j] = state_at(summaries, state_slot[c, 0], hv, k, v0 + j)
                put(entries, sequences + chain_piece[c, 1], hv, v0, s_s)
                for r in T.serial(1, width):
                    if transition_slot[c, r] >= 0:
                        for m, i in T.Parallel(D, D):
                            phi_s[m, i] = transition_at(summaries, transition_slot[c, r], hv, i, m)
                        for i, j in T.Parallel(D, BV):
                            acc[i, j] = state_at(summaries, state_slot[c, r], hv, i, v0 + j)
                        for m in T.serial(D):
                            for i, j in T.Parallel(D, BV):
                                acc[i, j] += phi_s[m, i] * s_s[m, j]
                        T.copy(acc, s_s)
                        put(entries, sequences + chain_piece[c, r + 1], hv, v0, s_s)

    return piece_entries

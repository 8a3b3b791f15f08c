"""The entry states of KDA's and GLA's cut pieces (``plans.channel_pieces``), on the device in one
launch.

The state entering piece p + 1 of a sequence is Φ_p S_p + F_p, F_p the piece walked from zero and
Φ_p its transition. Without the delta rule (GLA) Φ_p is diagonal: D_p, the product of the decay
rows of the windows piece p covers (one per key channel). With it (KDA) Φ_p is the K × K walk of
the identity (``chain_value``'s ``transition``). One CTA per (V tile, value head, sequence) walks
the sequence's pieces in order, a thread per key channel holding its row of the tile in
registers: fp32 multiplies and adds only (a tensor-core product would round the state), small
against the walks around it (the same steps as PyTorch operations cost the host about a
millisecond a call).
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

BLOCK = 32  # state columns a thread carries
LOADS = 8  # window decays a thread loads at once, unconditionally: loaded one by one (or under a test), their
# latency was the program's time


def channel_entries_program(*, value_heads: int, dim_k: int, dim_v: int, chunk: int, delta: bool = False):
    """The TileLang program: ``finals`` [P, HV, K, V] (each piece walked from zero), ``steps``:
    without ``delta`` the windows' decays [HV, rows, K] (row w: the decay of window w's last
    segment), with it the pieces' transitions [P, HV, K, K]; ``initial`` [N or more, HV, K, V]
    (read only with ``has_init``), the pieces' token ``bounds`` [P + 1] and each sequence's
    ``first`` and ``last`` piece [N] (int32), ``has_init``, then ``entries`` [P, HV, K, V]: a first
    piece's is its sequence's initial state (zeros without one). Grid: (V / BLOCK, HV, N)."""
    HV, K, V, C = value_heads, dim_k, dim_v, chunk
    assert V % BLOCK == 0
    f32 = "float32"
    pieces, rows, init_rows = T.dynamic("pieces"), T.dynamic("decay_rows"), T.dynamic("init_rows")
    seqs, bound_rows = T.dynamic("seqs"), T.dynamic("bound_rows")
    steps_shape = [pieces, HV, K, K] if delta else [HV, rows, K]

    @T.macro
    def transformed(steps, finals, state, s_s, p, hv, c, v0):
        """F_p + Φ_p S_p: the tile in shared memory, each thread's row of the product from all its rows."""
        for j in T.vectorized(BLOCK):
            s_s[c, j] = state[j]
        T.sync_threads()
        for j in T.vectorized(BLOCK):
            state[j] = finals[p, hv, c, v0 + j]
        for m in T.serial(K):
            phi = steps[p, hv, c, m]
            for j in T.unroll(BLOCK):
                state[j] = state[j] + phi * s_s[m, j]
        T.sync_threads()

    @T.prim_func
    def channel_entries(
        finals: T.Tensor([pieces, HV, K, V], f32),
        steps: T.Tensor(steps_shape, f32),
        initial: T.Tensor([init_rows, HV, K, V], f32),
        bounds: T.Tensor([bound_rows], "int32"),
        first: T.Tensor([seqs], "int32"),
        last: T.Tensor([seqs], "int32"),
        has_init: T.int32,
        entries: T.Tensor([pieces, HV, K, V], f32),
    ):
        with T.Kernel(V // BLOCK, HV, seqs, threads=K) as (b, hv, n):
            c = T.get_thread_binding()
            v0 = b * BLOCK
            state = T.alloc_local([BLOCK], f32)
            rows_l = T.alloc_local([LOADS], f32)
            d = T.alloc_var(f32)
            s_s = T.alloc_shared([K, BLOCK], f32) if delta else None
            if has_init > 0:
                for j in T.vectorized(BLOCK):
                    state[j] = initial[n, hv, c, v0 + j]
            else:
                for j in T.vectorized(BLOCK):
                    state[j] = 0.0
            for j in T.vectorized(BLOCK):
                entries[first[n], hv, c, v0 + j] = state[j]
            for p in T.serial(first[n], last[n]):  # piece p hands its end state to piece p + 1
                if delta:
                    transformed(steps, finals, state, s_s, p, hv, c, v0)
                else:
                    lo = bounds[p] // C
                    hi = T.ceildiv(bounds[p + 1], C)
                    d = 1.0
                    for w0 in T.serial(T.ceildiv(hi - lo, LOADS)):
                        for u in T.unroll(LOADS):  # unconditional loads (clamped rows), in flight together
                            rows_l[u] = steps[hv, T.min(lo + w0 * LOADS + u, hi - 1), c]
                        for u in T.unroll(LOADS):
                            d = d * T.if_then_else(lo + w0 * LOADS + u < hi, rows_l[u], 1.0)
                    for j in T.vectorized(BLOCK):
                        state[j] = d * state[j] + finals[p, hv, c, v0 + j]
                for j in T.vectorized(BLOCK):
                    entries[p + 1, hv, c, v0 + j] = state[j]

    return channel_entries

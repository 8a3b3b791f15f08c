"""Where the warm-up walk of each piece of a split sequence begins, decided on the device.

A piece that does not start its sequence needs the state at its first token. The state there is
Φ S + R: R is what the last chunks before the piece add, starting from zeros, and S the state
before them, carried through Φ = ∏ γ_t (I − β_t k_t k_tᵀ). Each factor's norm is at most
γ_t · max(1, |1 − β_t ‖k_t‖²|), so ‖Φ‖ ≤ e^{Σ_t a_t} with a_t = log γ_t + max(0, log |1 − β_t ‖k_t‖²|).
Walking back from the piece's start a chunk at a time, this kernel stops at the first chunk
boundary where that bound falls below 2⁻²⁴ (fp32's unit roundoff): R alone is then the state,
up to less than a rounding of the state the walk forgot. Where the bound never falls that low,
the warm-up goes back to the sequence's start and begins from its initial state: exact, and as
long as the sequence before the piece. Under real decays the warm-up is a few chunks.

The walk back stops after ``reach`` chunks: a piece whose bound is still above the threshold
there (and whose sequence starts further back) takes its entry state from the exact schedule
instead (``plans.entries``): it begins at its own start, from row N + p.
"""

import math

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.blocks.transforms import input_transforms

FORGOTTEN = -24 * math.log(2)  # log of the bound below which the earlier state is dropped
THREADS = 128  # a chunk's keys [64, K] squared and summed by row at once


def warm_start_program(*, heads: int, value_heads: int, dim_k: int, chunk: int, dtype: str, l2norm: bool,
                       gated: bool, gate_in_kernel: bool, beta_sigmoid: bool, neg_eigval: bool, reach: int):
    """The TileLang program: per (value head, piece), the warm-up's first token and initial row.

    Inputs per piece: ``start`` (its first token), ``first`` (its sequence's first token; pieces
    start a whole number of chunks after it) and ``seq`` (its sequence); ``has_init`` (0 or 1) and
    ``sequences`` (N). Writes ``begin[p, hv]`` and ``init_row[p, hv]``: the sequence's row of the
    initial state when the warm-up begins at the sequence's start and there is one, else −1
    (zeros); ``start[p]`` and N + p for a piece whose warm-up would reach back more than ``reach``
    chunks. Grid: (HV, P), THREADS threads.
    """
    H, HV, K, C = heads, value_heads, dim_k, chunk
    accum = "float32"
    group = HV // H
    tokens = T.dynamic("tokens")
    count = T.dynamic("pieces")
    transform = input_transforms(gate_in_kernel=gate_in_kernel, beta_sigmoid=beta_sigmoid,
                                 neg_eigval=neg_eigval)

    @T.prim_func
    def warm_start(
        k: T.Tensor([tokens, H, K], dtype),
        g: T.Tensor([tokens, HV], accum),
        beta: T.Tensor([tokens, HV], accum),
        a_log: T.Tensor([HV], accum),
        dt_bias: T.Tensor([HV], accum),
        start: T.Tensor([count], "int32"),
        first: T.Tensor([count], "int32"),
        seq: T.Tensor([count], "int32"),
        has_init: T.int32,
        sequences: T.int32,
        begin: T.Tensor([count, HV], "int32"),
        init_row: T.Tensor([count, HV], "int32"),
    ):
        with T.Kernel(HV, count, threads=THREADS) as (hv, p):
            tx = T.get_thread_binding()
            k_s = T.alloc_shared([C, K], dtype)
            sq_f = T.alloc_fragment([C, K], accum)
            ss_f = T.alloc_fragment([C], accum)
            g_s = T.alloc_shared([C], accum)
            b_s = T.alloc_shared([C], accum)
            a_s = T.alloc_shared([C], accum)
            bound = T.alloc_var(accum)
            used = T.alloc_var("int32")
            total = T.alloc_var(accum)
            bound = 0.0
            used = 0
            available = (start[p] - first[p]) // C
            for c in T.serial(T.min(available, reach)):
                t0 = start[p] - (c + 1) * C  # a whole chunk of the sequence: pieces start on chunk bounds
                if tx < C:
                    raw_g = g[t0 + tx, hv] if gated else 0.0  # without a gate g is not read
                    transform(raw_g, beta[t0 + tx, hv], a_log, dt_bias, hv, g_s, b_s, tx)
                if l2norm:
                    for i in T.Parallel(C):  # the kernel's keys have norm at most one
                        a_s[i] = g_s[i] + T.max(T.log(T.abs(1.0 - b_s[i])), 0.0)
                else:
                    T.copy(k[t0:t0 + C, hv // group, :], k_s)
                    T.copy(k_s, sq_f)
                    for i, j in T.Parallel(C, K):
                        sq_f[i, j] = sq_f[i, j] * sq_f[i, j]
                    T.reduce_sum(sq_f, ss_f, dim=1)
                    for i in T.Parallel(C):
                        a_s[i] = g_s[i] + T.max(T.log(T.abs(1.0 - b_s[i] * ss_f[i])), 0.0)
                total = 0.0
                for j in T.serial(C):
                    total = total + a_s[j]
                bound = bound + total
                used = used + 1
                if bound < FORGOTTEN:  # the same on every thread: all sum the same shared values in order
                    T.loop_break()
            if tx == 0:
                warm_row = T.if_then_else((start[p] - used * C == first[p]) & (has_init != 0), seq[p], -1)
                exact = (bound >= FORGOTTEN) & (used < available)  # still above it where the reach ends
                begin[p, hv] = T.if_then_else(exact, start[p], start[p] - used * C)
                init_row[p, hv] = T.if_then_else(exact, sequences + p, warm_row)

    return warm_start

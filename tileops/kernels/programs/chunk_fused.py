"""The GDN prefill in one warp-specialised kernel: one CTA per (sequence, value head).

Per chunk of the sequence (windows start at the sequence's first token; the last one is cut
at its end), three roles share the CTA through stages of shared tiles (two of the inputs, or
three; two of the first pass's results):

- the state warpgroups (one per 64 value rows) walk Sᵀ in registers exactly as the value-major
  chain does (``chunk_h.walk_step``), reading T', Mᵀ and the factors from
  shared memory; as soon as they leave a stage they start the copies of the chunk two (three)
  ahead into it, completing on the stage's ``loaded`` barrier: q, k and v by the copy engine
  (TMA, issued by one thread), the gates and step sizes by ``cp.async``;
- the first-pass warpgroup waits for a stage's inputs, applies ``chunk_prep``'s transforms,
  forms K Kᵀ and K Qᵀ on the tensor cores and turns them into T', Mᵀ and the factors on their
  accumulator registers (``wy_registers``: the gates' prefix sum restarts at the
  sequence's start, so it needs no segment search, and runs while the products do; Mᵀ comes
  from K Qᵀ, so that one exponential per pair of tokens serves A and M; the inverse goes by
  16 × 16 blocks on mma.sync), stores
  T' and Mᵀ to the stage by matrix stores in the swizzle the walkers' tensor cores read, and
  arrives on its ``ready`` barrier. With three input stages it may run two chunks ahead of the
  walk, so it first waits for the walk to leave the results' stage (``consumed``); with two, a
  stage's inputs arrive only once the walk has left it, which orders both;
- registers move from the first-pass warpgroup to the state warpgroups (``setmaxnreg``) when
  they are two: 2 · 192 + 120 = 3 · 168, what a 384-thread CTA is given.

The state never leaves registers and T', Mᵀ never leave shared memory, so a chunk's global
traffic is its q, k, v, g, β in and o out. With three input stages and the matrix moves the
output goes out through the chunk's own V tile (each warp writes back the columns it read, by
``walk_moves``' matrix stores) instead of a tile of its own. With ``walk_moves='tma-output'`` a
whole chunk's output goes out by the copy engine from two tiles of its own, issued by one thread
(the last chunk of a sequence, cut at its end, row by row): a store reads one tile while the walk
writes the next.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures
from tilelang.layout import make_swizzled_layout

from tileops.kernels.blocks.chunk_h import walk_step
from tileops.kernels.blocks.entry import Sequences, kernel_entry
from tileops.kernels.blocks.kkt import key_products
from tileops.kernels.blocks.state_io import state_io
from tileops.kernels.blocks.transforms import input_transforms
from tileops.kernels.blocks.walk_moves import SOURCE as MATRIX_MOVES_SOURCE
from tileops.kernels.blocks.wy_merge import SOURCE
from tileops.kernels.blocks.wy_registers import SOURCE as REGISTERS_SOURCE
from tileops.kernels.blocks.wy_registers import register_first_pass, swizzled
from tileops.kernels.hardware import REGISTERS, WARPGROUP
from tileops.kernels.plans.tiles import EXCHANGE_BLOCKS, EXCHANGE_LD, FUSED_STAGES

STATE_REGS = 192  # a state thread: Sᵀ (64 fp32), its 16-bit copy and three C-wide tiles live at once


def fused_program(*, heads: int, value_heads: int, dim_k: int, dim_v: int, chunk: int, dtype: str,
                  sequences: str, state_v_first: bool, l2norm: bool, gated: bool, gate_in_kernel: bool,
                  beta_sigmoid: bool, neg_eigval: bool, scale: float, walk_moves: str = "elementwise", walk_issue: str = "serial",
                  stages: int = FUSED_STAGES, summary: bool = False, value_tile: int = 0):
    """The TileLang program, specialised on everything but lengths and counts.

    Arguments: q, k, v, g, beta, a_log, dt_bias, h0, then the tables of ``sequences`` (equal,
    packed or pieces: ``blocks.entry``), o, ht; g, beta, A_log and dt_bias in fp32 (g is not read
    without ``gated``). Grid (HV, N) or (HV, P) for pieces; threads: one warpgroup per 64 value rows and one more. ``walk_moves``
    and ``walk_issue``: how the walk moves Vᵀ in and Oᵀ out and how its products wait
    (``walk_step``'s ``moves`` and ``issue``). ``stages``: the input stages, 2 or 3 (with 3 the
    matrix moves put the output through the V tile). The V and output tiles are in the copy
    engine's swizzle, which the matrix moves address. A piece's warm-up chunks, before its
    ``start``, store no output.

    ``summary`` (pieces only, elementwise V moves): the walk of each piece without outputs, for the
    exact schedule (``plans.entries``). It takes no ``o`` and leaves in row ``out_row`` of ``ht``
    the piece's state from row ``init_row`` of ``h0`` (−1: zeros), or with ``init_row`` −2 its
    transition: the walk from the identity with v = 0 (K = V), Φ in the state's place. After
    ``h0`` it takes the walk's rows [P, HV] (``warm_start``'s), each job's chain [J], the chains'
    pieces [Q, M] and N: a job walks only if a piece of its chain starts from an entry row
    (N or above) for its value head. ``value_tile`` (a summary's, 64 of a 128-wide state): each
    CTA walks that many value rows of the job's state (grid (V / value_tile, HV, jobs)), which the
    delta rule updates independently of the others, Φ's included; 0 walks all V.
    """
    H, HV, K, V, C, S, SO = heads, value_heads, dim_k, dim_v, chunk, stages, FUSED_STAGES
    BV = value_tile or V  # the value rows one CTA walks
    assert BV == V or (summary and V % BV == 0 and BV % 64 == 0), "only a summary splits the value rows"
    ahead = S > SO  # the first pass may run ahead of the walk's use of its results
    through_v = ahead and walk_moves == "matrix"  # the output through the chunk's V tile, before its refill
    by_copy_engine = walk_moves == "tma-output"  # whole output tiles stored by the copy engine, from two tiles
    # The output before the next loads: through the V tile they refill, or from the tile the copy
    # engine stores while the walk goes on.
    output_first = through_v or by_copy_engine
    group = HV // H
    accum = "float32"
    walkers = WARPGROUP * (BV // 64)
    threads = walkers + WARPGROUP
    # What setmaxnreg moves: the launch gives every thread the same share (rounded to 8).
    shifted = BV // 64 > 1
    aux_regs = REGISTERS // threads // 8 * 8 * (BV // 64 + 1) - STATE_REGS * (BV // 64)
    tokens = T.dynamic("tokens")
    seqs = Sequences(sequences, HV, with_state=True, tokens=tokens)
    pieces = sequences == "pieces"
    inputs = [("q", T.Tensor([tokens, H, K], dtype)), ("k", T.Tensor([tokens, H, K], dtype)),
              ("v", T.Tensor([tokens, HV, V], dtype)), ("g", T.Tensor([tokens, HV], accum)),
              ("beta", T.Tensor([tokens, HV], accum)), ("a_log", T.Tensor([HV], accum)),
              ("dt_bias", T.Tensor([HV], accum)), ("h0", T.Tensor(seqs.state_shape(HV, K, V, state_v_first), accum))]
    assert not summary or (pieces and walk_moves != "matrix" and K == V), "a summary walks pieces, V elementwise, K = V"
    if summary:
        chains, width, plan_pieces = T.dynamic("chains"), T.dynamic("width"), T.dynamic("plan_pieces")
        inputs += [("walk_rows", T.Tensor([plan_pieces, HV], "int32")), ("job_chain", T.Tensor([seqs.count], "int32")),
                   ("chain_piece", T.Tensor([chains, width], "int32")), ("sequences", T.int32)]
    outputs = [] if summary else [("o", T.Tensor([tokens, HV, V], dtype))]
    outputs.append(("ht", T.Tensor(seqs.state_shape(HV, K, V, state_v_first, out=True), accum)))
    # T' is zero in the rows and columns of tokens past the sequence's end (their β is), so the walk
    # needs no masks.
    step, store_output = walk_step(rows=BV, dim_k=K, chunk=C, dtype=dtype, m_transposed=True,
                                   moves=walk_moves, issue=walk_issue, masked=False, outputs=not summary)
    prelude = SOURCE + REGISTERS_SOURCE + (MATRIX_MOVES_SOURCE if walk_moves == "matrix" else "")
    load_state, store_state = state_io(value_rows=True, rows=BV, cols=K, state_v_first=state_v_first)
    transform = input_transforms(gate_in_kernel=gate_in_kernel, beta_sigmoid=beta_sigmoid,
                                 neg_eigval=neg_eigval)
    products = key_products(rows=C, width=K, l2norm=l2norm, keys_first=True, wait=False, queries=not summary)
    gates, pairs, inverse, store_tile = register_first_pass(l2norm=l2norm, scale=scale, dtype=dtype,
                                                            queries=not summary)

    @T.macro
    def load_inputs(q, k, v, g, beta, q_s, k_s, v_s, gi_s, bi_s, loaded, s, t0, h, hv, v0):
        """Start the copies of the chunk at t0 into stage s; its barrier completes when they land:
        q, k and v (its value rows v0 on) by the copy engine, issued by one thread, the gates and
        step sizes by cp.async."""
        if not summary:  # a summary has no output: its first pass forms no M
            T.tma_copy(q[t0:t0 + C, h, :], q_s[s, :, :], barrier=loaded[s])
        T.tma_copy(k[t0:t0 + C, h, :], k_s[s, :, :], barrier=loaded[s])
        if BV == V:
            T.tma_copy(v[t0:t0 + C, hv, :], v_s[s, :, :], barrier=loaded[s])
        else:
            T.tma_copy(v[t0:t0 + C, hv, v0:v0 + BV], v_s[s, :, :], barrier=loaded[s])
        if gated:  # without a gate g is not read
            T.async_copy(g[t0:t0 + C, hv], gi_s[s, :])
        T.async_copy(beta[t0:t0 + C, hv], bi_s[s, :])
        T.cp_async_barrier_noinc(loaded[s])

    @T.macro
    def first_pass(q_s, k_s, gi_s, bi_s, tp_s, m_s, f_s, x_s, a_log, dt_bias, hv, s, so, hi, row):
        """T', Mᵀ and the factors of the chunk in input stage s into result stage so (rows 0..hi of
        it in the sequence)."""
        a_f = T.alloc_fragment([C, C], accum)
        mt_f = a_f if summary else T.alloc_fragment([C, C], accum)  # a summary forms no Mᵀ
        g_s = T.alloc_shared([C], accum)
        b_s = T.alloc_shared([C], accum)
        rk_s = T.alloc_shared([C], accum)
        rq_s = T.alloc_shared([C], accum)
        gates_l = T.alloc_local([2], accum)
        if row < C:
            if row < hi:
                raw_g = gi_s[s, row] if gated else 0.0  # without a gate: a log decay of 0, g not loaded
                transform(raw_g, bi_s[s, row], a_log, dt_bias, hv, g_s, b_s, row)
            else:
                g_s[row] = 0.0
                b_s[row] = 0.0
        products(q_s[s, :, :], k_s[s, :, :], rq_s, rk_s, a_f, mt_f)
        gates(g_s, rk_s, rq_s, f_s, so, gates_l, hi, row)  # while the products run
        T.wait_wgmma(0)
        T.warpgroup_fence_operand(a_f, num_regs=C // 2)
        if not summary:
            T.warpgroup_fence_operand(mt_f, num_regs=C // 2)
        # Rows past the sequence's end have β = 0 and γ held, so they add nothing to A and only
        # reach outputs that are not stored.
        pairs(a_f, mt_f, gates_l, b_s, rk_s, rq_s, row)
        if not summary:
            store_tile(mt_f, m_s, so, row)
        inverse(a_f, b_s, x_s, row)
        store_tile(a_f, tp_s, so, row)

    @T.macro
    def emit_output(o_f, tile, s, o, t0, hv, hi, store_from):
        """The chunk's outputs out through ``tile`` (stage s of it), for chunks from token
        ``store_from`` on: a piece's warm-up skips them (a whole sequence stores from its start)."""
        if pieces:
            if t0 >= store_from:
                store_output(o_f, tile, s, o, t0, hv, 0, 0, hi)
        else:
            store_output(o_f, tile, s, o, t0, hv, 0, 0, hi)

    @T.macro
    def identity(s_f, transition, v0):
        """The transition's walk starts from the identity (a summary's job with ``init_row`` −2):
        its value rows v0 on."""
        for i, j in T.Parallel(BV, K):
            s_f[i, j] = T.if_then_else(transition, T.if_then_else(v0 + i == j, 1.0, 0.0), s_f[i, j])

    @T.macro
    def run(q, k, v, g, beta, a_log, dt_bias, h0, o, ht, hv, bos, eos, init_row, has_init, out_row, store_from,
            transition, v0):
        h = hv // group
        q_s = T.alloc_shared([S, C, K], dtype)
        k_s = T.alloc_shared([S, C, K], dtype)
        v_s = T.alloc_shared([S, C, BV], dtype)
        gi_s = T.alloc_shared([S, C], accum)
        bi_s = T.alloc_shared([S, C], accum)
        tp_s = T.alloc_shared([SO, C, C], dtype)
        m_s = T.alloc_shared([SO, C, C], dtype)
        f_s = T.alloc_shared([SO, 4, C], accum)
        T.annotate_layout({tp_s: swizzled(tp_s), m_s: swizzled(m_s), v_s: make_swizzled_layout(v_s)})
        if not (through_v or summary):
            o_s = T.alloc_shared([2 if by_copy_engine else 1, C, V], dtype)
            T.annotate_layout({o_s: make_swizzled_layout(o_s)})
        loaded = T.alloc_barrier(arrive_count=[walkers] * S)
        ready = T.alloc_barrier(arrive_count=[WARPGROUP] * SO)
        if ahead:
            consumed = T.alloc_barrier(arrive_count=[walkers] * SO)
        windows = T.ceildiv(eos - bos, C)
        tx = T.get_thread_binding()
        if tx < walkers:
            if shifted:
                T.set_max_nreg(STATE_REGS, 1)
            s_f = T.alloc_fragment([BV, K], accum)
            if not summary:
                o_f = T.alloc_fragment([V, C], accum)
            for c in T.serial(T.min(windows, S)):
                load_inputs(q, k, v, g, beta, q_s, k_s, v_s, gi_s, bi_s, loaded, c, bos + c * C, h, hv, v0)
            load_state(h0, s_f, init_row, hv, v0, has_init)
            if summary:
                identity(s_f, transition, v0)
            for c in T.serial(windows):
                s = c % S
                so = c % SO
                t0 = bos + c * C
                hi = T.min(eos - t0, C)
                T.barrier_wait(ready[so], (c // SO) % 2)
                if summary:  # the state only: no output (the step reads no o_f)
                    step(q_s, k_s, v_s, tp_s, m_s, f_s, s, so, 0, hi, s_f, s_f, T.Not(transition))
                else:
                    step(q_s, k_s, v_s, tp_s, m_s, f_s, s, so, 0, hi, s_f, o_f)
                if ahead:
                    T.barrier_arrive(consumed[so])
                if not summary:
                    if through_v:
                        emit_output(o_f, v_s, s, o, t0, hv, hi, store_from)
                    elif output_first:
                        emit_output(o_f, o_s, c % 2 if by_copy_engine else 0, o, t0, hv, hi, store_from)
                    if by_copy_engine:
                        T.tma_store_wait(1)  # the store of the chunk before has read its tile
                if c + S < windows:
                    load_inputs(q, k, v, g, beta, q_s, k_s, v_s, gi_s, bi_s, loaded, s, t0 + S * C, h, hv, v0)
                if not (output_first or summary):
                    emit_output(o_f, o_s, 0, o, t0, hv, hi, store_from)
            if pieces:
                if out_row >= 0:
                    store_state(ht, s_f, out_row, hv, v0)
            else:
                store_state(ht, s_f, out_row, hv, v0)
            if by_copy_engine and not summary:
                T.tma_store_wait(0, read=False)
        else:
            if shifted:
                T.set_max_nreg(aux_regs, 0)
            x_s = T.alloc_shared([EXCHANGE_BLOCKS * 16, EXCHANGE_LD], "float16")
            for c in T.serial(windows):
                s = c % S
                so = c % SO
                T.barrier_wait(loaded[s], (c // S) % 2)
                if ahead:  # the walk has left the results of chunk c - SO (a fresh barrier passes)
                    T.barrier_wait(consumed[so], ((c // SO) % 2) ^ 1)
                first_pass(q_s, k_s, gi_s, bi_s, tp_s, m_s, f_s, x_s, a_log, dt_bias, hv, s, so,
                           T.min(eos - bos - c * C, C), tx - walkers)
                T.fence_proxy_async()  # the walkers' wgmma reads what these stores wrote
                T.barrier_arrive(ready[so])

    @T.macro
    def launch(q, k, v, g, beta, a_log, dt_bias, h0, o, ht, seqs):
        with T.Kernel(HV, seqs.walks, threads=threads, prelude=prelude) as (hv, n):
            run(q, k, v, g, beta, a_log, dt_bias, h0, o, ht, hv, seqs.begin(n, hv), seqs.end(n, hv), seqs.init_row(n, hv),
                seqs.has_init(n, hv), seqs.out_row(n), seqs.store_from(n), False, 0)

    @T.macro
    def summary_job(q, k, v, g, beta, a_log, dt_bias, h0, walk_rows, job_chain, chain_piece, sequences, ht, seqs,
                    hv, n, v0):
        """Job n's walk for value head hv, its value rows v0 on."""
        needed = T.alloc_var("int32")
        needed = 0
        for r in T.serial(chain_piece.shape[1]):
            piece = chain_piece[job_chain[n], r]
            if piece >= 0:
                if walk_rows[piece, hv] >= sequences:
                    needed = 1
        # A job nobody needs walks no chunk and moves no state: an empty range, no state in or out.
        bos = seqs.begin(n, hv)
        run(q, k, v, g, beta, a_log, dt_bias, h0, None, ht, hv, bos, T.if_then_else(needed > 0, seqs.end(n, hv), bos),
            seqs.init_row(n, hv), T.if_then_else(needed > 0, seqs.has_init(n, hv), 0),
            T.if_then_else(needed > 0, seqs.out_row(n), -1), seqs.store_from(n),
            T.And(needed > 0, seqs.transition(n, hv)), v0)

    @T.macro
    def launch_summary(q, k, v, g, beta, a_log, dt_bias, h0, walk_rows, job_chain, chain_piece, sequences, ht, seqs):
        if BV == V:
            with T.Kernel(HV, seqs.walks, threads=threads, prelude=prelude) as (hv, n):
                summary_job(q, k, v, g, beta, a_log, dt_bias, h0, walk_rows, job_chain, chain_piece, sequences, ht,
                            seqs, hv, n, 0)
        else:
            with T.Kernel(V // BV, HV, seqs.walks, threads=threads, prelude=prelude) as (vt, hv, n):
                summary_job(q, k, v, g, beta, a_log, dt_bias, h0, walk_rows, job_chain, chain_piece, sequences, ht,
                            seqs, hv, n, vt * BV)

    return kernel_entry("summary" if summary else "fused", seqs, inputs, outputs, launch_summary if summary else launch)

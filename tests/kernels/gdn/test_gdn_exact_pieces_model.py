"""The exact schedule of cut sequences (``plans.entries``), piece by piece in float64, against the
reference recurrence.

``walk`` does per 64-token chunk what the fused program's walk does (``blocks.chunk_h``, value-major
Sᵀ): the first pass's T' = (I + A)⁻¹ diag(β), Mᵀ and factors from the chunk's cumulative log
decays (each floored as ``blocks.transforms`` floors it; tokens past the sequence's end with
β = 0 and g = 0), then Xᵀ = Vᵀ − (Sᵀ Kᵀ) diag(f_x), Δᵀ = Xᵀ T'ᵀ, Oᵀ = (Sᵀ Qᵀ) diag(f_o) + Δᵀ Mᵀ
and Sᵀ = f_c Sᵀ + (Δᵀ diag(f_s)) K. ``schedule`` runs the three launches from the host tables
the launcher hands the programs (``entry_plan``): every summary job (a piece's state from zeros
or from the initial state, or its transition from the identity with v = 0), the chains of
``programs.piece_entries`` in their order, then every piece from its entry row. The gate kinds
are the benchmarks' (``tileops.cases.log_decays``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tileops.cases import GATE_KINDS, log_decays
from tileops.kernels.blocks.transforms import LOG_DECAY_FLOOR
from tileops.kernels.plans.entries import IDENTITY, WARM_REACH, entry_plan
from tileops.kernels.plans.pieces import host_plan, summary_jobs, summary_span, summary_time
from tileops.kernels.programs.warm_start import FORGOTTEN
from tileops.reference import recurrent_delta_rule

F64 = torch.float64
C = 64
CPU = torch.device("cpu")


def chunk_pass(q, k, g, beta, scale):
    """T', Mᵀ and the factors (f_x, f_o, f_s, f_c) of one chunk: q, k [C, K], g, beta [C]."""
    gamma = g.clamp_min(LOG_DECAY_FLOOR).cumsum(0)
    lower = torch.ones(C, C, dtype=torch.bool).tril()
    decay = torch.where(lower, (gamma[:, None] - gamma[None, :]).clamp_max(0).exp(), 0.0)
    a = (beta[:, None] * decay * (k @ k.T)).tril(-1)
    tp = torch.linalg.solve_triangular(torch.eye(C, dtype=F64) + a, torch.diag(beta), upper=False)
    m = scale * decay * (q @ k.T)
    last = gamma[-1]
    return tp, m, (gamma.exp(), scale * gamma.exp(), (last - gamma).exp(), last.exp())


def walk(q, k, v, g, beta, st, *, scale, outputs=True):
    """Sᵀ [V, K] carried over tokens 0..L of one (sequence piece, head): (Oᵀ [V, L] or None, Sᵀ)."""
    length = q.shape[0]
    out = []
    for t0 in range(0, length, C):
        hi = min(length - t0, C)

        def window(x, fill=0.0):
            w = torch.full((C, *x.shape[1:]), fill, dtype=F64)
            w[:hi] = x[t0:t0 + hi]
            return w
        qc, kc, vc, gc, bc = window(q), window(k), window(v), window(g), window(beta)
        tp, m, (fx, fo, fs, fc) = chunk_pass(qc, kc, gc, bc, scale)
        xt = vc.T - (st @ kc.T) * fx
        dt = xt @ tp.T
        if outputs:
            out.append(((st @ qc.T) * fo + dt @ m.T)[:, :hi])
        st = fc * st + (dt * fs) @ kc
    return (torch.cat(out, 1) if outputs else None), st


def warm_rows(k, g, beta, plan, reach, has_init, sequences):
    """``warm_start``'s tables in float64: per (piece, value head) the warm-up's first token and row,
    or the piece's own start and entry row N + p where the bound has not dropped below fp32's
    rounding within ``reach`` chunks (every piece that does not start its sequence, with reach 0)."""
    group = g.shape[1] // k.shape[1]
    a = g.clamp_min(LOG_DECAY_FLOOR) + (1 - beta * k.square().sum(-1).repeat_interleave(group, 1)).abs().log().clamp_min(0)
    begin = torch.zeros(plan.count, g.shape[1], dtype=torch.long)
    rows = torch.zeros_like(begin)
    for p in range(plan.count):
        start, first, seq = int(plan.start[p]), int(plan.first[p]), int(plan.seq[p])
        for hv in range(g.shape[1]):
            available, used, bound = (start - first) // C, 0, 0.0
            while used < min(available, reach):
                bound += float(a[start - (used + 1) * C:start - used * C, hv].sum())
                used += 1
                if bound < FORGOTTEN:
                    break
            if used < available and bound >= FORGOTTEN:
                begin[p, hv], rows[p, hv] = start, sequences + p
            else:
                begin[p, hv] = start - used * C
                rows[p, hv] = seq if begin[p, hv] == first and has_init else -1
    return begin, rows


def schedule(q, k, v, g, beta, h0, lengths, piece_chunks, scale, reach=0, value_tile=0, span=0):
    """(o [T, HV, V], final [N, HV, K, V]) of packed sequences [T, H, .] through the exact schedule:
    every piece that does not start its sequence from its entry state (``reach`` 0), or only those
    whose warm-up would reach back more than ``reach`` chunks. ``g`` None: no gate (DeltaNet), the
    programs' log decays 0 and the plan's ``exact_rows`` in place of ``warm_start``'s.
    ``value_tile``: each summary walked as the split program walks it, that many value rows at a
    time (the identity's rows from the tile's first on), 0 all at once. ``span``: the chunks each
    summary job walks (0: a piece)."""
    heads, value_heads = k.shape[1], v.shape[1]
    group = value_heads // heads
    plan = host_plan(lengths, piece_chunks, C, value_heads, CPU)
    ep = entry_plan(lengths, piece_chunks, C, value_heads, CPU, span)
    has_init = int(h0 is not None)
    dim, n = k.shape[2], len(lengths)
    if g is None:
        g = torch.zeros_like(beta)
        begin, rows = plan.starts.long(), plan.exact_rows[has_init].long()
    else:
        begin, rows = warm_rows(k, g, beta, plan, reach, has_init, n)

    def piece(hv, lo, hi):
        h = hv // group
        return q[lo:hi, h], k[lo:hi, h], v[lo:hi, hv], g[lo:hi, hv], beta[lo:hi, hv]

    def needed(chain, hv):  # a piece of the chain starts from its entry row for this head
        return any(int(p) >= 0 and int(rows[int(p), hv]) >= n for p in ep.chain_piece[chain])

    summaries = torch.zeros(ep.jobs, value_heads, dim, dim, dtype=F64)  # key-major, as stored
    for j in range(ep.jobs):
        for hv in range(value_heads):
            if not needed(int(ep.job_chain[j]), hv):
                continue
            row = int(ep.init_rows[has_init, j, hv])
            qp, kp, vp, gp, bp = piece(hv, int(ep.begin[j, hv]), int(ep.end[j]))
            if row == IDENTITY:
                st, vp = torch.eye(dim, dtype=F64), torch.zeros_like(vp)
            else:
                st = h0[row, hv].T if row >= 0 else torch.zeros(dim, dim, dtype=F64)
            tile = value_tile or dim
            for v0 in range(0, dim, tile):  # value rows v0.. of Sᵀ: the columns v0.. of the stored state
                rows_t = walk(qp, kp, vp[:, v0:v0 + tile], gp, bp, st[v0:v0 + tile], scale=scale, outputs=False)[1]
                summaries[int(ep.out_row[j]), hv, :, v0:v0 + tile] = rows_t.T
    entries = torch.full((n + plan.count, value_heads, dim, dim), float("nan"), dtype=F64)
    if h0 is not None:
        entries[:n] = h0
    for c in range(ep.chains):
        for hv in range(value_heads):
            if not needed(c, hv):
                continue
            state = summaries[int(ep.state_slot[c, 0]), hv]
            entries[n + int(ep.chain_piece[c, 1]), hv] = state
            for r in range(1, ep.chain_piece.shape[1]):
                if int(ep.transition_slot[c, r]) >= 0:
                    phi, step = summaries[int(ep.transition_slot[c, r]), hv], summaries[int(ep.state_slot[c, r]), hv]
                    state = phi @ state + step
                    entries[n + int(ep.chain_piece[c, r + 1]), hv] = state
    o = torch.zeros(q.shape[0], value_heads, dim, dtype=F64)
    final = torch.zeros(n, value_heads, dim, dim, dtype=F64)
    for p in range(plan.count):
        start, hi = int(plan.start[p]), int(plan.end[p])
        for hv in range(value_heads):
            lo, row = int(begin[p, hv]), int(rows[p, hv])
            st = entries[row, hv].T if row >= 0 else torch.zeros(dim, dim, dtype=F64)
            ot, st = walk(*piece(hv, lo, hi), st, scale=scale)
            o[start:hi, hv] = ot.T[start - lo:]
            if int(plan.out_row[p]) >= 0:
                final[int(plan.out_row[p]), hv] = st.T
    return o, final


def inputs(gen, lengths, heads, value_heads, dim, gates, init):
    def randn(shape):
        return torch.randn(*shape, generator=gen, dtype=F64)

    def rand(shape):
        return torch.rand(*shape, generator=gen, dtype=F64)
    tokens = sum(lengths)
    q = F.normalize(randn((tokens, heads, dim)), dim=-1)
    k = F.normalize(randn((tokens, heads, dim)), dim=-1)
    v = randn((tokens, value_heads, dim))
    g = log_decays(gates, (1, tokens, value_heads), randn, rand, 8.0)[0]
    beta = rand((tokens, value_heads)) * 0.9 + 0.05
    h0 = 0.1 * randn((len(lengths), value_heads, dim, dim)) if init else None
    return q, k, v, g, beta, h0


def relative(a, b):
    return ((a - b).norm() / b.norm()).item()


def reference(q, k, v, g, beta, h0, lengths, scale):
    cu = torch.tensor([0, *lengths]).cumsum(0)
    o, final = recurrent_delta_rule(q[None], k[None], v[None], beta[None], g[None], scale=scale, initial_state=h0,
                                    cu_seqlens=cu)
    return o[0], final


CUTS = [((1100,), 4, False),  # one sequence in five pieces, the last cut short
        ((700, 1, 64, 300, 129), 2, True)]  # packed, mixed: a one-token sequence, uncut and cut ones


@pytest.mark.parametrize("gates", GATE_KINDS)
@pytest.mark.parametrize("lengths, piece_chunks, init", CUTS)
def test_the_exact_schedule_is_the_recurrence(rng, gates, lengths, piece_chunks, init):
    heads, value_heads, dim, scale = 1, 2, 16, 0.25
    q, k, v, g, beta, h0 = inputs(rng, lengths, heads, value_heads, dim, gates, init)
    o, final = schedule(q, k, v, g, beta, h0, lengths, piece_chunks, scale)
    ref_o, ref_final = reference(q, k, v, g, beta, h0, lengths, scale)
    assert relative(o, ref_o) <= 1e-12
    assert relative(final, ref_final) <= 1e-12


@pytest.mark.parametrize("lengths, piece_chunks, init", CUTS)
def test_without_a_gate_every_later_piece_starts_from_its_exact_entry(rng, lengths, piece_chunks, init):
    # DeltaNet through the same programs: no g read, no warm_start launch (the plan's exact rows).
    q, k, v, _, beta, h0 = inputs(rng, lengths, 1, 2, 16, "zero", init)
    o, final = schedule(q, k, v, None, beta, h0, lengths, piece_chunks, 0.25)
    cu = torch.tensor([0, *lengths]).cumsum(0)
    ref_o, ref_final = recurrent_delta_rule(q[None], k[None], v[None], beta[None], None, scale=0.25,
                                            initial_state=h0, cu_seqlens=cu)
    assert relative(o, ref_o[0]) <= 1e-12 and relative(final, ref_final) <= 1e-12
    plan = host_plan(lengths, piece_chunks, C, 2, CPU)
    later = plan.start != plan.first
    assert (plan.exact_rows[1][later] >= len(lengths)).all() and (plan.exact_rows[1][~later, 0] == plan.seq[~later]).all()


@pytest.mark.parametrize("gates", GATE_KINDS)
def test_warm_ups_within_reach_and_exact_entries_beyond_it(rng, gates):
    # The shipped mix: per (piece, value head) a warm-up where its bound drops within WARM_REACH
    # chunks (only the benchmarks' and the steep gates, which forget fast, here), the exact entry elsewhere. A
    # warm-up drops less than fp32's rounding of the state it forgets.
    lengths, heads, value_heads, dim, scale = (1500, 900), 1, 2, 16, 0.25
    q, k, v, g, beta, h0 = inputs(rng, lengths, heads, value_heads, dim, gates, True)
    plan = host_plan(lengths, 4, C, value_heads, CPU)
    begin, rows = warm_rows(k, g, beta, plan, WARM_REACH, 1, len(lengths))
    exact = rows >= len(lengths)
    assert exact.any() == (gates not in ("benchmark", "steep"))
    o, final = schedule(q, k, v, g, beta, h0, lengths, 4, scale, reach=WARM_REACH)
    ref_o, ref_final = reference(q, k, v, g, beta, h0, lengths, scale)
    tol = 1e-12 if exact[plan.start != plan.first].all() else 1e-6
    assert relative(o, ref_o) <= tol and relative(final, ref_final) <= tol


def test_a_full_reset_is_exact_through_the_floor(rng):
    # A log decay of -inf anywhere, a piece boundary included: floored, the decay across it is 0.
    lengths = (600,)
    q, k, v, g, beta, h0 = inputs(rng, lengths, 1, 1, 16, "benchmark", True)
    g[[5, 63, 64, 200, 256, 599], 0] = float("-inf")
    o, final = schedule(q, k, v, g, beta, h0, lengths, 2, 0.25)
    ref_o, ref_final = recurrent_delta_rule(q[None], k[None], v[None], beta[None], g[None], scale=0.25,
                                            initial_state=h0, cu_seqlens=torch.tensor([0, 600]))
    assert torch.isfinite(o).all() and relative(o, ref_o[0]) <= 1e-12 and relative(final, ref_final) <= 1e-12


def test_each_piece_is_summarised_once_and_chained_in_order():
    lengths = (1100, 64, 300)
    ep = entry_plan(lengths, 4, C, 2, CPU)
    plan = host_plan(lengths, 4, C, 2, CPU)
    assert plan.count == 5 + 1 + 2 and ep.jobs == (4 + 3) + (1 + 0)  # R of non-last pieces, Φ of middle ones
    assert (ep.end - ep.begin[:, 0] <= 4 * C).all()  # each job walks its own piece only
    assert sorted(ep.out_row.tolist()) == list(range(ep.jobs))
    assert ep.chains == 2  # the 64-token sequence is not cut
    for chain in ep.chain_piece.tolist():
        pieces = [p for p in chain if p >= 0]
        starts = [int(plan.start[p]) for p in pieces]
        assert starts == sorted(starts) and int(plan.start[pieces[0]]) == int(plan.first[pieces[0]])
        assert all(int(plan.end[a]) == int(plan.start[b]) for a, b in zip(pieces, pieces[1:]))


@pytest.mark.parametrize("gates", ["zero", "weak", "mamba"])
@pytest.mark.parametrize("span", [2, 1])
@pytest.mark.parametrize("lengths, piece_chunks, init", CUTS)
def test_summaries_over_spans_shorter_than_a_piece_are_the_recurrence(rng, gates, span, lengths, piece_chunks, init):
    # Jobs of half or a quarter of a piece: more of them and a longer chain, whose states at the
    # pieces' starts are the entries.
    q, k, v, g, beta, h0 = inputs(rng, lengths, 1, 2, 16, gates, init)
    o, final = schedule(q, k, v, g, beta, h0, lengths, piece_chunks, 0.25, span=span)
    ref_o, ref_final = reference(q, k, v, g, beta, h0, lengths, 0.25)
    assert relative(o, ref_o) <= 1e-12
    assert relative(final, ref_final) <= 1e-12


def test_spans_tile_the_pieces_and_enter_each_at_its_start():
    lengths, piece_chunks, span = (1100, 64, 300), 4, 2
    ep = entry_plan(lengths, piece_chunks, C, 2, CPU, span)
    plan = host_plan(lengths, piece_chunks, C, 2, CPU)
    # 1100 tokens: pieces of 256, 256, 256, 256, 76; the four before the last in spans of 128: R of 8,
    # Φ of 7. 300 tokens: 256 + 44, one span pair: R of 2, Φ of 1.
    assert ep.jobs == (8 + 7) + (2 + 1) and (ep.end - ep.begin[:, 0] <= span * C).all()
    for c in range(ep.chains):
        steps = [int(s) for s in ep.state_slot[c] if s >= 0]
        bounds = [(int(ep.begin[j, 0]), int(ep.end[j])) for j in steps]
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))  # contiguous, in order
        first = int(ep.chain_piece[c, 0])
        starts = {int(plan.start[p]) for p in range(plan.count) if plan.seq[p] == plan.seq[first]}
        entered = []
        for r, p in enumerate(ep.chain_piece[c].tolist()[1:len(bounds) + 1], start=1):
            at = bounds[r][0] if r < len(bounds) else bounds[-1][1]  # where S_r stands
            assert (p != first) == (at in starts)  # a piece's start, or inside a piece: the first's row
            if p != first:
                assert int(plan.start[p]) == at
                entered.append(p)
        assert len(entered) == len(starts) - 1


def test_a_summary_span_is_shortened_only_where_it_fills_the_last_wave():
    sms = 132
    # B1 x T32768 at HV32 in pieces of 128 chunks: 160 jobs, two waves of 128 chunks; spans of 64:
    # 352 jobs in three waves of 64 and three more chain steps.
    assert summary_jobs(512, 128) == 5 and summary_jobs(512, 128, 64) == 11
    assert summary_span((32768,), C, 128, 32, sms) == 64
    assert summary_span((32768,) + (100,) * 50, C, 128, 32, sms) == 64  # packed: short ones need no summary
    assert summary_time((512,), 128, 32, sms, 64) < summary_time((512,), 128, 32, sms, 128)
    # Where whole pieces' jobs fill their waves, they stay whole.
    assert summary_span((32768,) * 2, C, 128, 32, sms) == 128  # 320 jobs: three waves either way
    assert summary_span((8192,) * 4, C, 64, 16, sms) == 64  # 64 jobs: one wave
    assert summary_span((8192,), C, 64, 16, sms) == 64  # 16 jobs: one wave, split on value rows instead
    assert summary_span((1100,), C, 4, 2, sms) == 4  # no span below MIN_SPAN


@pytest.mark.parametrize("gates", ["zero", "weak"])
def test_summaries_walked_in_value_row_tiles_are_the_recurrence(rng, gates):
    # The split summary program (``value_tile``): each CTA walks half of Sᵀ's value rows, the
    # transitions' from the identity's rows of its half.
    lengths, piece_chunks, init = CUTS[1]
    q, k, v, g, beta, h0 = inputs(rng, lengths, 1, 2, 16, gates, init)
    o, final = schedule(q, k, v, g, beta, h0, lengths, piece_chunks, 0.25, value_tile=8)
    ref_o, ref_final = reference(q, k, v, g, beta, h0, lengths, 0.25)
    assert relative(o, ref_o) <= 1e-12
    assert relative(final, ref_final) <= 1e-12

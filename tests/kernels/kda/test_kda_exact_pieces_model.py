"""The exact schedule of cut sequences under one decay per key channel (KDA's gated delta rule and
GLA's gated sum), piece by piece in float64, against the reference recurrence.

The walk is affine in its state: a piece maps its entry state S to Φ S + R, with R the piece walked
from zeros and Φ the piece walked from the identity with v = 0 (each window's step is
S ↦ (diag(e^{γ_end}) − K_sᵀ T' K_x) S + K_sᵀ T' V; without the delta rule the first term is the
decay alone). As GDN's schedule (docs/exact-pieces.md), with a diagonal decay in place of a scalar:
every piece's summaries at once, the entries chained through each sequence, then every piece walked
from its entry. Nothing depends on the gate values, so the result is exact under any gates, where a
warm-up's reach would depend on them. Pieces are cut at window boundaries, where the first pass's
outputs are those of the uncut sequence.
"""

from __future__ import annotations

import pytest
import torch

from tests.kernels.kda.prefill_model import C, F64, first_pass, walk
from tests.kernels.kda.test_kda_prefill_model import GATES, call, reference, relative


def pieces(bos: int, eos: int, width: int) -> list[tuple[int, int]]:
    """A sequence's pieces: ``width`` windows each, cut at the windows of the packed axis."""
    cuts = [bos] + list(range((bos // (width * C) + 1) * width * C, eos, width * C)) + [eos]
    return list(zip(cuts, cuts[1:]))


def schedule(q, k, v, g, beta, h0, bounds, scale, width):
    """o [tokens, HV, V] and the final states [N, HV, K, V] by the exact schedule."""
    group = v.shape[2] // q.shape[2]
    per_head = [x[0].repeat_interleave(group, dim=1) for x in (q, k)]
    first = first_pass(*per_head, g[0], None if beta is None else beta[0], bounds, scale=scale)
    tokens, heads, dim = per_head[0].shape
    dim_v = v.shape[-1]
    o = torch.zeros(tokens, heads, dim_v, dtype=F64)
    final = torch.zeros(len(bounds) - 1, heads, dim, dim_v, dtype=F64)
    for n, (bos, eos) in enumerate(zip(bounds, bounds[1:])):
        cut = pieces(bos, eos, width)
        ends = [eos if b == eos else None for _, b in cut]
        # 1. summaries, each from nothing but its own tokens: R of every piece with a successor
        # (the first from the initial state), Φ of every piece that also has a predecessor
        start = torch.zeros(heads, dim, dim_v, dtype=F64) if h0 is None else h0[n]
        zeros_v = torch.zeros_like(v[0])
        eye = torch.eye(dim, dtype=F64).expand(heads, dim, dim)
        r = [walk(first, v[0], a, b, start if p == 0 else torch.zeros_like(start), sequence_end=None)
             for p, (a, b) in enumerate(cut[:-1])]
        phi = [walk(first, zeros_v, a, b, eye, sequence_end=None) for a, b in cut[1:-1]]
        # 2. the entries: S_1 = R_0, S_{p+1} = Φ_p S_p + R_p
        entry = [start] + r[:1]
        for p in range(1, len(cut) - 1):
            entry.append(phi[p - 1] @ entry[p] + r[p])
        # 3. every piece from its entry, outputs on
        for (a, b), s, end in zip(cut, entry, ends):
            state = walk(first, v[0], a, b, s, o, sequence_end=n if end is not None else None)
        final[n] = state
    return o, final


@pytest.mark.parametrize("kind", GATES)
@pytest.mark.parametrize("lengths, width", [((700,), 2), ((300, 520, 77), 1), ((130, 640), 3)],
                         ids=["one-long", "packed-one-window-pieces", "packed-three-window-pieces"])
def test_the_exact_schedule_is_the_recurrence(kind, lengths, width):
    """≤ 1e-12 under zero, weak, Mamba-initialised, benchmark and strong (down to −5 a token)
    per-channel gates, with an initial state, value heads sharing key heads, and sequences that
    share windows."""
    args = call(lengths, kind=kind, seed=5)
    o, final = schedule(*args, scale=0.3, width=width)
    ref_o, ref_final = reference(*args, scale=0.3)
    assert relative(o, ref_o) <= 1e-12
    assert relative(final, ref_final) <= 1e-12


@pytest.mark.parametrize("kind", ["zero", "weak"])
def test_without_the_delta_rule_the_transition_is_the_decay(kind):
    """GLA (no β): the same schedule, Φ the decay alone, exact as well."""
    q, k, v, g, beta, h0, bounds = call((700, 90), kind=kind, seed=6)
    o, final = schedule(q, k, v, g, None, h0, bounds, scale=0.3, width=2)
    ref_o, ref_final = reference(q, k, v, g, None, h0, bounds, scale=0.3)
    assert relative(o, ref_o) <= 1e-12 and relative(final, ref_final) <= 1e-12


def test_the_pieces_cover_each_sequence_at_window_boundaries():
    assert pieces(0, 700, 2) == [(0, 128), (128, 256), (256, 384), (384, 512), (512, 640), (640, 700)]
    assert pieces(300, 820, 1) == [(300, 320), (320, 384), (384, 448), (448, 512), (512, 576), (576, 640),
                                   (640, 704), (704, 768), (768, 820)]
    assert pieces(5, 40, 4) == [(5, 40)]

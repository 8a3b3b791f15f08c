"""GLA's few long sequences cut into pieces (``plans.channel_pieces``), as tl.gla_prefill runs
them, in float64: the launcher's own ``cut_plan``, the first pass with the pieces as packed
sequences, the chain from zero, the entries as ``programs.channel_entries`` forms them (from the
plan's tables, the windows' decay rows and the pieces' finals), the chain again from the entries; against the reference on the uncut sequences (equal and packed, starting and ending
inside windows), under every gate kind. Then how long a call's pieces are, and the plan's words."""

from __future__ import annotations

import pytest
import torch

from tileops.callspec import CallSpec, make_flags
from tileops.kernels.channel_prefill_kernel import ChannelPrefillConfig, plan
from tileops.kernels.plans.channel_pieces import MIN_WINDOWS, cut_plan, piece_windows
from tileops.reference.gla.chunk import chunk_gla
from tests.kernels.kda.prefill_model import C, F64, chain, chained_entries, first_pass
from tests.kernels.kda.test_kda_prefill_model import GATES, gates, relative


CUTS = [  # (lengths, the windows a piece spans)
    ((8 * C,) * 2, 2),  # equal lengths of whole windows
    ((5 * C + 17, 3 * C - 40, 40, 9 * C + 3), 2),  # packed, starting and ending inside windows
    ((7 * C + 1,), 3),  # a last piece of one token
]


def entries_model(plan, finals, decay, initial):
    """Without the delta rule the step is D_p ⊙ S_p, D_p the product of the decay rows of the
    windows piece p spans."""
    bounds = plan.bounds.tolist()

    def decayed(p, state):
        d = torch.ones(decay.shape[0], decay.shape[2], dtype=F64)
        for w in range(bounds[p] // C, -(-bounds[p + 1] // C)):
            d = d * decay[:, w]
        return d[..., None] * state
    return chained_entries(plan, finals, initial, decayed)


@pytest.mark.parametrize("kind", GATES)
@pytest.mark.parametrize("with_state", [True, False], ids=["initial-state", "zeros"])
@pytest.mark.parametrize("lengths, width", CUTS, ids=["equal", "packed", "one-token-tail"])
def test_the_cut_schedule_is_the_recurrence(kind, with_state, lengths, width):
    gen = torch.Generator().manual_seed(7)
    H, D, scale = 2, 32, 0.3
    T, N = sum(lengths), len(lengths)
    q = torch.randn(1, T, H, D, generator=gen, dtype=F64)
    k = torch.nn.functional.normalize(torch.randn(1, T, H, D, generator=gen, dtype=F64), dim=-1)
    v = torch.randn(1, T, H, D, generator=gen, dtype=F64)
    g = gates(kind, (1, T, H, D), gen)
    h0 = torch.randn(N, H, D, D, generator=gen, dtype=F64) if with_state else None
    plan = cut_plan(lengths, width, C, torch.device("cpu"))
    bounds = plan.bounds.tolist()
    assert plan.count > N and all(b % C == 0 for b in bounds if b not in set(torch.tensor(lengths).cumsum(0).tolist()))
    flat = [x[0] for x in (q, k, v, g)]
    first = first_pass(flat[0], flat[1], flat[3], None, bounds, scale=scale)
    _, from_zero = chain(first, flat[2], bounds)
    entries = entries_model(plan, from_zero, first[5], h0)
    o, finals = chain(first, flat[2], bounds, entries)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    ref_o, ref_final, _ = chunk_gla(q, k, v, g, scale=scale, initial_state=h0, cu_seqlens=cu, chunk_size=C)
    assert relative(o[None], ref_o) <= 1e-12
    assert relative(finals[plan.last], ref_final) <= 1e-12
    # Every piece's entry is the true state at its first token.
    for p in range(plan.count):
        n = int((cu[1:] > bounds[p]).nonzero()[0])
        start = int(cu[n])
        if bounds[p] == start:
            continue
        span = slice(start, bounds[p])
        _, state, _ = chunk_gla(q[:, span], k[:, span], v[:, span], g[:, span], scale=scale,
                                initial_state=None if h0 is None else h0[n:n + 1], chunk_size=C)
        assert relative(entries[p], state[0]) <= 1e-12


@pytest.mark.parametrize("lengths, tiles, width", [
    ((32768,), 32, 64),          # B1×T32768 H16, 64-row V tiles: 8 pieces for 132 SMs' 264 slots
    ((32768,) * 2, 32, 128),
    ((8192,) * 4, 32, 0),        # B4×T8192 H16: two pieces a sequence would only double the walks
    ((32768,), 264, 0),          # the walks fill two CTAs an SM already
    ((64 * C,), 8, MIN_WINDOWS),  # no piece shorter than MIN_WINDOWS
    ((2 * MIN_WINDOWS * C,), 8, 0),  # two pieces of MIN_WINDOWS: no gain
    ((32768, *(300,) * 15), 32, 74),  # one long prompt among short ones: 587 windows for 8 slots
])
def test_pieces_fill_the_sms_and_pay(lengths, tiles, width):
    assert piece_windows(lengths, C, tiles, 132) == width


def spec(batch: int, tokens: int, mode: str = "prefill", **flags) -> CallSpec:
    return CallSpec(op="gla", entry="GLAFwdOp", mode=mode, dtype=torch.bfloat16, device=torch.device("cuda"),
                    arch="sm90", device_name="NVIDIA H200", batch=batch, tokens=tokens, heads=16, value_heads=16,
                    dim_k=128, dim_v=128, flags=make_flags(scale=128 ** -0.5, **flags))


def test_the_plan_says_when_sequences_are_cut():
    assert "pieces of 64 windows" in plan(ChannelPrefillConfig(), spec(1, 32768), delta=False)
    assert "pieces" not in plan(ChannelPrefillConfig(), spec(4, 8192), delta=False)
    assert "pieces" not in plan(ChannelPrefillConfig(), spec(1, 32768, state_v_first=True), delta=False)
    # A packed call is cut only when its lengths reach the host (cu_seqlens_cpu): not in its plan.
    assert "pieces" not in plan(ChannelPrefillConfig(), spec(1, 32768, mode="varlen"), delta=False)

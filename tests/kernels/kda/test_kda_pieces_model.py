"""KDA's few long sequences cut into pieces (``plans.channel_pieces``), as tl.kda_prefill runs them,
in float64: the launcher's own ``cut_plan``, the first pass with the pieces as packed sequences,
the chain from zero (each piece's F), the chain from the identity with v = 0 (each piece's
transition Φ, ``chain_value``'s ``transition``), the entries as ``programs.channel_entries`` forms
them under the delta rule (S_{p+1} = Φ_p S_p + F_p, in sequence order), the chain again from the
entries; against the reference recurrence on the uncut sequences (equal and packed, starting and
ending inside windows), under every gate kind. Then when a call is cut, and the plan's words."""

from __future__ import annotations

import pytest
import torch

from tileops.callspec import CallSpec, make_flags
from tileops.kernels.channel_prefill_kernel import ChannelPrefillConfig, plan
from tileops.kernels.plans.channel_pieces import cut_plan, piece_windows
from tests.kernels.gla.test_gla_pieces_model import CUTS
from tests.kernels.kda.prefill_model import C, F64, chain, chained_entries, first_pass
from tests.kernels.kda.test_kda_prefill_model import GATES, call, reference, relative


@pytest.mark.parametrize("kind", GATES)
@pytest.mark.parametrize("with_state", [True, False], ids=["initial-state", "zeros"])
@pytest.mark.parametrize("lengths, width", CUTS, ids=["equal", "packed", "one-token-tail"])
def test_the_cut_schedule_is_the_recurrence(kind, with_state, lengths, width):
    q, k, v, g, beta, h0, bounds = call(lengths, kind=kind, seed=11, with_state=with_state)
    plan_ = cut_plan(lengths, width, C, torch.device("cpu"))
    pieces = plan_.bounds.tolist()
    assert plan_.count > len(lengths)
    group = v.shape[2] // q.shape[2]
    per_head = [x[0].repeat_interleave(group, dim=1) for x in (q, k)]
    first = first_pass(*per_head, g[0], beta[0], pieces, scale=0.3)
    heads, dim = v.shape[2], v.shape[3]
    _, finals = chain(first, v[0], pieces)
    eye = torch.eye(dim, dtype=F64).expand(plan_.count, heads, dim, dim)
    _, transitions = chain(first, torch.zeros_like(v[0]), pieces, eye)
    entries = chained_entries(plan_, finals, h0, lambda p, state: transitions[p] @ state)
    o, ends = chain(first, v[0], pieces, entries)
    ref_o, ref_final = reference(q, k, v, g, beta, h0, bounds, scale=0.3)
    assert relative(o, ref_o) <= 1e-12
    assert relative(ends[plan_.last], ref_final) <= 1e-12


@pytest.mark.parametrize("lengths, tiles, width", [
    ((32768,), 32, 128),         # B1×T32768 H16, 64-row V tiles: four pieces, one CTA an SM
    ((32768,), 16, 64),          # H8 (a model's heads over four GPUs): eight pieces
    ((32768,), 64, 0),           # H32: two CTAs' worth of pieces would take three walks of half the sequence
    ((8192,) * 4, 32, 0),        # B4×T8192 H16
    ((32768, *(300,) * 15), 16, 74),  # one long prompt among short ones: 587 windows for 8 slots
])
def test_pieces_pay_for_three_walks(lengths, tiles, width):
    assert piece_windows(lengths, C, tiles, 132, delta=True) == width


def spec(batch: int, tokens: int, heads: int = 16, mode: str = "prefill", dim: int = 128, **flags) -> CallSpec:
    return CallSpec(op="kda", entry="KDAFwdOp", mode=mode, dtype=torch.bfloat16, device=torch.device("cuda"),
                    arch="sm90", device_name="NVIDIA H200", batch=batch, tokens=tokens, heads=heads,
                    value_heads=heads, dim_k=dim, dim_v=dim, flags=make_flags(scale=dim ** -0.5, **flags))


def test_the_plan_says_when_sequences_are_cut():
    assert "pieces of 128 windows" in plan(ChannelPrefillConfig(), spec(1, 32768))
    assert "walk from the identity" in plan(ChannelPrefillConfig(), spec(1, 32768))
    assert "pieces of 64 windows" in plan(ChannelPrefillConfig(), spec(1, 32768, heads=8))  # the bench's H8 row
    assert "pieces" not in plan(ChannelPrefillConfig(), spec(1, 32768, heads=32))
    assert "pieces" not in plan(ChannelPrefillConfig(), spec(4, 8192))
    assert "pieces" not in plan(ChannelPrefillConfig(), spec(1, 32768, state_v_first=True))

"""GLA's few long sequences cut into pieces (``plans.channel_pieces``), as tl.gla_prefill runs
them, in float64: the first pass with the pieces as packed sequences, the chain from zero, the
launcher's own ``piece_entries``, the chain again from the entries; against the reference on the
uncut sequences, under every gate kind. Then how many pieces a call gets, and the plan's words."""

from __future__ import annotations

import pytest
import torch

from tileops.callspec import CallSpec, make_flags
from tileops.kernels.channel_prefill_kernel import ChannelPrefillConfig, plan
from tileops.kernels.plans.channel_pieces import MIN_WINDOWS, cut_bounds, piece_entries, pieces_per_sequence
from tileops.reference.gla.chunk import chunk_gla
from tests.kernels.kda.prefill_model import C, F64, chain, first_pass
from tests.kernels.kda.test_kda_prefill_model import GATES, gates, relative


@pytest.mark.parametrize("kind", GATES)
@pytest.mark.parametrize("with_state", [True, False], ids=["initial-state", "zeros"])
def test_the_cut_schedule_is_the_recurrence(kind, with_state):
    gen = torch.Generator().manual_seed(7)
    B, P, H, D, scale = 2, 4, 2, 32, 0.3
    T = P * 2 * C  # two windows a piece
    q = torch.randn(B, T, H, D, generator=gen, dtype=F64)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, D, generator=gen, dtype=F64), dim=-1)
    v = torch.randn(B, T, H, D, generator=gen, dtype=F64)
    g = gates(kind, (B, T, H, D), gen)
    h0 = torch.randn(B, H, D, D, generator=gen, dtype=F64) if with_state else None
    bounds = cut_bounds(B, T, P, torch.device("cpu")).tolist()
    assert bounds == list(range(0, B * T + 1, 2 * C))
    flat = [x.reshape(B * T, H, D) for x in (q, k, v, g)]
    first = first_pass(flat[0], flat[1], flat[3], None, bounds, scale=scale)
    _, from_zero = chain(first, flat[2], bounds)
    entries = piece_entries(from_zero, first[5][:, :B * T // C], h0, B, P)
    o, finals = chain(first, flat[2], bounds, entries)
    ref_o, ref_final, _ = chunk_gla(q, k, v, g, scale=scale, initial_state=h0, chunk_size=C)
    assert relative(o.reshape(B, T, H, D), ref_o) <= 1e-12
    assert relative(finals.view(B, P, H, D, D)[:, -1], ref_final) <= 1e-12
    # Every piece's entry is the true state at its first token.
    for n in range(B):
        for p in range(1, P):
            t = p * T // P
            _, state, _ = chunk_gla(q[n:n + 1, :t], k[n:n + 1, :t], v[n:n + 1, :t], g[n:n + 1, :t], scale=scale,
                                    initial_state=None if h0 is None else h0[n:n + 1], chunk_size=C)
            assert relative(entries[n * P + p], state[0]) <= 1e-12


@pytest.mark.parametrize("batch, windows, tiles, pieces", [
    (1, 512, 32, 8),      # B1×T32768 H16, 64-row V tiles: 256 CTAs for 132 SMs
    (2, 512, 32, 4),
    (4, 128, 32, 1),      # B4×T8192 H16: two pieces would only double the walks
    (1, 512, 264, 1),     # the walks fill two CTAs an SM already
    (1, 4 * MIN_WINDOWS, 8, 4),  # no piece shorter than MIN_WINDOWS
    (1, 4 * MIN_WINDOWS + 1, 8, 1),  # a window count the pieces cannot share evenly
])
def test_pieces_fill_the_sms_with_whole_windows(batch, windows, tiles, pieces):
    assert pieces_per_sequence(batch, windows, tiles, 132) == pieces


def spec(batch: int, tokens: int, mode: str = "prefill", **flags) -> CallSpec:
    return CallSpec(op="gla", entry="GLAFwdOp", mode=mode, dtype=torch.bfloat16, device=torch.device("cuda"),
                    arch="sm90", device_name="NVIDIA H200", batch=batch, tokens=tokens, heads=16, value_heads=16,
                    dim_k=128, dim_v=128, flags=make_flags(scale=128 ** -0.5, **flags))


def test_the_plan_says_when_sequences_are_cut():
    assert "cut into 8 pieces" in plan(ChannelPrefillConfig(), spec(1, 32768), delta=False)
    assert "cut" not in plan(ChannelPrefillConfig(), spec(4, 8192), delta=False)
    assert "cut" not in plan(ChannelPrefillConfig(), spec(1, 32768), delta=True)  # KDA: the transition is not a decay
    assert "cut" not in plan(ChannelPrefillConfig(), spec(1, 32768 - 1), delta=False)
    assert "cut" not in plan(ChannelPrefillConfig(), spec(1, 32768, mode="varlen"), delta=False)

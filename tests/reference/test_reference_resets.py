"""A log decay of −inf is a full reset: the chunked form equals the recurrence exactly (no NaN,
tokens before the reset untouched), in every gate layout, chunk size and solve; gates formed from
raw inputs never overflow to NaN."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tileops.reference.delta_rule.chunk import chunk_delta_rule
from tileops.reference.delta_rule.naive import recurrent_delta_rule
from tileops.reference.transforms import gdn_gate, kda_gate

F64 = torch.float64


def inputs(rng, gate_shape, resets):
    B, T, H, K, V = 1, 37, 2, 8, 8
    q = torch.randn(B, T, H, K, generator=rng, dtype=F64)
    k = F.normalize(torch.randn(B, T, H, K, generator=rng, dtype=F64), dim=-1)
    v = torch.randn(B, T, H, V, generator=rng, dtype=F64)
    beta = torch.rand(B, T, H, generator=rng, dtype=F64)
    g = F.logsigmoid(torch.randn(B, T, *gate_shape, generator=rng, dtype=F64))
    g[:, resets] = float("-inf")
    return q, k, v, beta, g


@pytest.mark.parametrize("gate_shape", [(2,), (2, 8)], ids=["scalar", "per-channel"])
@pytest.mark.parametrize("delta", [True, False], ids=["delta", "gla"])
@pytest.mark.parametrize("chunk_size, subchunk", [(16, 8), (64, 8), (5, 2), (16, 16)])
def test_a_reset_in_the_chunked_form_equals_the_recurrence(rng, gate_shape, delta, chunk_size, subchunk):
    resets = [0, 9, 10, 21, 36]  # the first token, two in a row, a chunk's last, the sequence's last
    q, k, v, beta, g = inputs(rng, gate_shape, resets)
    beta = beta if delta else None
    state = torch.randn(1, 2, 8, 8, generator=rng, dtype=F64)
    expected, expected_state = recurrent_delta_rule(q, k, v, beta, g, scale=0.4, initial_state=state)
    o, final = chunk_delta_rule(q, k, v, beta, g, scale=0.4, initial_state=state, chunk_size=chunk_size,
                                subchunk=subchunk)
    assert torch.isfinite(o).all() and torch.isfinite(final).all()
    torch.testing.assert_close(o, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(final, expected_state, rtol=1e-10, atol=1e-10)


def test_a_reset_forgets_everything_before_it(rng):
    q, k, v, beta, g = inputs(rng, (2,), [20])
    o, final = chunk_delta_rule(q, k, v, beta, g, scale=0.4, chunk_size=16)
    fresh, fresh_final = chunk_delta_rule(*(x[:, 20:] for x in (q, k, v, beta, g)), scale=0.4, chunk_size=16)
    torch.testing.assert_close(o[:, 20:], fresh, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(final, fresh_final, rtol=1e-10, atol=1e-10)


def test_the_gradient_through_a_reset_is_finite(rng):
    q, k, v, beta, g = inputs(rng, (2, 8), [3, 17])
    leaves = [x.requires_grad_() for x in (q, k, v, beta)]
    o, final = chunk_delta_rule(q, k, v, beta, g, scale=0.4, chunk_size=8)
    (o.sum() + final.sum()).backward()
    assert all(torch.isfinite(x.grad).all() for x in leaves)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_gdn_gate_never_overflows_to_nan(dtype):
    g = torch.tensor([[-300.0, -40.0, -1.0, 0.0, 3.0, 60.0]], dtype=dtype)
    for a_log in (-2.0, 0.0, 89.0, 200.0, 800.0):
        decay = gdn_gate(g, torch.full((6,), a_log, dtype=dtype), torch.zeros(6, dtype=dtype))
        assert not decay.isnan().any() and (decay <= 0).all(), (a_log, decay)
    exact = gdn_gate(g.to(F64), torch.full((6,), 1.5, dtype=F64), torch.zeros(6, dtype=F64))
    torch.testing.assert_close(exact, -torch.tensor(1.5, dtype=F64).exp() * F.softplus(g.to(F64)))


def test_kda_gate_never_overflows_to_nan():
    g = torch.tensor([-300.0, -1.0, 0.0, 1e-30, 2.0, 60.0]).view(1, 1, 1, 6)
    for a_log in (0.0, 89.0, 200.0):
        for bound in (None, -5.0):
            decay = kda_gate(g, torch.tensor([a_log]), None, bound)
            assert not decay.isnan().any() and (decay <= 0).all(), (a_log, bound, decay)
    bounded = kda_gate(g, torch.tensor([200.0]), None, -5.0).flatten().tolist()
    assert bounded[0] == 0.0 and bounded[2] == -2.5 and bounded[3] == -5.0

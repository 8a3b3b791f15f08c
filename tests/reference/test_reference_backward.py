"""Gradients of the chunk ops against torch.autograd through the definition, in float64."""

import pytest
import torch

from tileops.reference import chunk_delta_rule, deltanet_chunk_backward, gla_chunk_backward, recurrent_delta_rule
from tileops.tuner.gate import relative_error as rel


def naive_grads(inputs, forward, cotangents):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    outputs = forward(*leaves)
    loss = sum((out * cot).sum() for out, cot in zip(outputs, cotangents) if cot is not None)
    return torch.autograd.grad(loss, leaves)


@pytest.mark.parametrize("length", [16, 37])
def test_deltanet_chunk_backward(make_inputs, rng, length):
    x = make_inputs(2, length, 2, 8, 6)
    q, k, v, beta = (x[n].transpose(1, 2) for n in ("q", "k", "v", "beta"))
    S = torch.randn(2, 2, 4, 8, 6, generator=rng, dtype=torch.float64)
    do = torch.randn(2, 2, length, 6, generator=rng, dtype=torch.float64)
    grads = deltanet_chunk_backward(do, q, k, v, beta, S, chunk_size=16)

    def forward(q, k, v, beta):
        o, _ = recurrent_delta_rule(*(t.transpose(1, 2) for t in (q, k, v, beta)), scale=1.0, initial_state=S[:, :, 0])
        return (o.transpose(1, 2),)
    expected = naive_grads((q, k, v, beta), forward, (do,))
    for got, want in zip(grads, expected):
        assert got.shape == want.shape and rel(got, want) < 1e-10


@pytest.mark.parametrize("has_initial_state", [False, True])
@pytest.mark.parametrize("with_dht", [False, True])
def test_gla_chunk_backward(make_inputs, rng, has_initial_state, with_dht):
    length, C = 40, 16
    x = make_inputs(2, length, 2, 8, 4, gate="channel", delta=False)
    q, k, v, g = x["q"], x["k"], x["v"], x["g"]
    h = torch.randn(2, 4, 2, 8, 4, generator=rng, dtype=torch.float64)
    do = torch.randn(2, length, 2, 4, generator=rng, dtype=torch.float64)
    dht = torch.randn(2, 2, 8, 4, generator=rng, dtype=torch.float64) if with_dht else None
    grads = gla_chunk_backward(q, k, v, g, h, do, dht, scale=0.4, chunk_size=C, has_initial_state=has_initial_state)

    def forward(q, k, v, g):
        return recurrent_delta_rule(q, k, v, None, g, scale=0.4, initial_state=h[:, 0] if has_initial_state else None)
    expected = naive_grads((q, k, v, g), forward, (do, dht))
    for got, want in zip(grads, expected):
        assert got.shape == want.shape and rel(got, want) < 1e-10


def test_gradients_return_in_input_dtypes(make_inputs, rng):
    x = make_inputs(1, 20, 1, 8, 8, gate="channel", delta=False, dtype=torch.bfloat16)
    h = torch.zeros(1, 3, 1, 8, 8)
    do = torch.randn(1, 20, 1, 8, generator=rng).to(torch.bfloat16)
    g = x["g"].float()
    grads = gla_chunk_backward(x["q"], x["k"], x["v"], g, h, do, None, scale=0.3, chunk_size=8, has_initial_state=False)
    assert [t.dtype for t in grads] == [torch.bfloat16] * 3 + [torch.float32]


@pytest.mark.parametrize("solve", ["triangular", "substitution"])
def test_gradcheck_chunked_kda(make_inputs, rng, solve):
    x = make_inputs(1, 5, 1, 3, 2, gate="channel", value_heads=2)
    state = torch.randn(1, 2, 3, 2, generator=rng, dtype=torch.float64, requires_grad=True)
    inputs = tuple(x[n].clone().requires_grad_() for n in ("q", "k", "v", "beta", "g")) + (state,)

    def forward(q, k, v, beta, g, state):
        return chunk_delta_rule(q, k, v, beta, g, scale=0.6, initial_state=state, chunk_size=2, solve=solve, subchunk=1)
    assert torch.autograd.gradcheck(forward, inputs, fast_mode=True)

"""The definition itself: the token-by-token recurrence, its decode step and the input transforms."""

import pytest
import torch

from tileops.reference import (beta_transform, delta_rule_step, gdn_gate, gla_step, kda_gate, l2norm,
                               recurrent_delta_rule, recurrent_gla)
from tileops.tuner.gate import relative_error as rel

FAMILIES = {"deltanet": (None, True), "gdn": ("scalar", True), "kda": ("channel", True), "gla": ("channel", False)}


def direct_loop(q, k, v, beta, g, scale, state):
    """The math note's recurrence with explicit loops over sequences, heads and tokens."""
    B, T, H, _ = q.shape
    HV = v.shape[2]
    o = torch.empty_like(v)
    final = torch.empty_like(state)
    for b in range(B):
        for hv in range(HV):
            h = hv // (HV // H)
            S = state[b, hv].clone()
            for t in range(T):
                if g is not None:
                    decay = g[b, t, hv].exp()
                    S = (decay[:, None] if decay.dim() else decay) * S
                kt = k[b, t, h]
                delta = v[b, t, hv] if beta is None else beta[b, t, hv] * (v[b, t, hv] - S.T @ kt)
                S = S + torch.outer(kt, delta)
                o[b, t, hv] = S.T @ (scale * q[b, t, h])
            final[b, hv] = S
    return o, final


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("group", [1, 2])
def test_recurrence_is_the_direct_loop(make_inputs, rng, family, group):
    gate, delta = FAMILIES[family]
    x = make_inputs(2, 6, 2, 4, 3, gate=gate, value_heads=2 * group, delta=delta)
    state = torch.randn(2, 2 * group, 4, 3, generator=rng, dtype=torch.float64)
    o, final = recurrent_delta_rule(x["q"], x["k"], x["v"], x["beta"], x["g"], scale=0.7, initial_state=state)
    o_ref, final_ref = direct_loop(x["q"], x["k"], x["v"], x["beta"], x["g"], 0.7, state)
    assert rel(o, o_ref) < 1e-12 and rel(final, final_ref) < 1e-12


def test_recurrence_without_state_starts_from_zeros(make_inputs):
    x = make_inputs(2, 5, 1, 4, 3, gate="scalar")
    o, final = recurrent_delta_rule(**x, scale=0.5)
    o_ref, final_ref = recurrent_delta_rule(**x, scale=0.5, initial_state=torch.zeros(2, 1, 4, 3, dtype=torch.float64))
    assert torch.equal(o, o_ref) and torch.equal(final, final_ref)


def test_varlen_runs_each_sequence_alone(make_inputs, rng):
    bounds = [0, 4, 5, 12, 20]
    x = make_inputs(1, 20, 2, 4, 3, gate="channel", value_heads=4)
    states = torch.randn(4, 4, 4, 3, generator=rng, dtype=torch.float64)
    o, final = recurrent_delta_rule(**x, scale=0.5, initial_state=states, cu_seqlens=torch.tensor(bounds))
    for n, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        part = {name: t[:, start:end] for name, t in x.items()}
        o_n, final_n = recurrent_delta_rule(**part, scale=0.5, initial_state=states[n:n + 1])
        assert torch.equal(o[:, start:end], o_n) and torch.equal(final[n:n + 1], final_n)


def test_dtypes_follow_the_conventions(make_inputs):
    x = make_inputs(1, 3, 1, 4, 4, gate="scalar", dtype=torch.bfloat16)
    o, final = recurrent_delta_rule(**x, scale=0.5)
    assert o.dtype == torch.bfloat16 and final.dtype == torch.float32
    o, final = recurrent_delta_rule(**make_inputs(1, 3, 1, 4, 4), scale=0.5)
    assert o.dtype == final.dtype == torch.float64


@pytest.mark.parametrize("family", FAMILIES)
def test_decode_steps_chain_to_the_prefill(make_inputs, rng, family):
    gate, delta = FAMILIES[family]
    x = make_inputs(2, 7, 1, 4, 3, gate=gate, value_heads=2, delta=delta)
    state = torch.randn(2, 2, 4, 3, generator=rng, dtype=torch.float64)
    o, final = recurrent_delta_rule(**x, scale=0.4, initial_state=state)
    for t in range(7):
        token = {name: None if v is None else v[:, t] for name, v in x.items()}
        o_t, state = delta_rule_step(token["q"], token["k"], token["v"], token["beta"], state, token["g"], scale=0.4)
        assert rel(o_t, o[:, t]) < 1e-12
    assert rel(state, final) < 1e-12


def test_deltanet_step_is_the_documented_update(make_inputs, rng):
    x = make_inputs(3, 1, 2, 4, 3)
    q, k, v, beta = (x[n][:, 0] for n in ("q", "k", "v", "beta"))
    S = torch.randn(3, 2, 4, 3, generator=rng, dtype=torch.float64)
    o, S_new = delta_rule_step(q, k, v, beta, S, scale=1.0)
    v_new = beta[..., None] * (v - torch.einsum("bhkv,bhk->bhv", S, k))
    assert rel(o, torch.einsum("bhkv,bhk->bhv", S, q) + (q * k).sum(-1, keepdim=True) * v_new) < 1e-12
    assert rel(S_new, S + k[..., None] * v_new[..., None, :]) < 1e-12


def test_gla_is_the_recurrence_without_delta_rule(make_inputs, rng):
    x = make_inputs(2, 5, 2, 4, 3, gate="channel", delta=False)
    state = torch.randn(2, 2, 4, 3, generator=rng, dtype=torch.float64)
    o, final = recurrent_gla(x["q"], x["k"], x["v"], x["g"], scale=0.3, initial_state=state)
    o_ref, final_ref = direct_loop(x["q"], x["k"], x["v"], None, x["g"], 0.3, state)
    assert rel(o, o_ref) < 1e-12 and rel(final, final_ref) < 1e-12
    q, k, v, gk = (x[n][:, 0] for n in ("q", "k", "v", "g"))
    o_step, S_new = gla_step(q, k, v, gk, state, scale=0.3)
    expected = gk.exp()[..., None] * state + k[..., None] * v[..., None, :]
    assert rel(S_new, expected) < 1e-12
    assert rel(o_step, 0.3 * torch.einsum("bhkv,bhk->bhv", expected, q)) < 1e-12


def test_l2norm(rng):
    x = torch.randn(3, 5, 8, generator=rng).to(torch.bfloat16)
    y = l2norm(x)
    x32 = x.float()
    assert y.dtype == torch.float32
    assert torch.allclose(y, x32 / torch.sqrt((x32 ** 2).sum(-1, keepdim=True) + 1e-6), rtol=1e-6)


def test_beta_transform(rng):
    beta = torch.randn(2, 5, 3, generator=rng, dtype=torch.float64)
    assert torch.equal(beta_transform(beta, sigmoid=False, neg_eigval=False), beta)
    assert torch.allclose(beta_transform(beta, sigmoid=True, neg_eigval=False), 1 / (1 + torch.exp(-beta)))
    assert torch.allclose(beta_transform(beta, sigmoid=True, neg_eigval=True), 2 / (1 + torch.exp(-beta)))
    with pytest.raises(ValueError, match="sigmoid"):
        beta_transform(beta, sigmoid=False, neg_eigval=True)


def test_gdn_gate(rng):
    g, A_log, dt_bias = (torch.randn(*s, generator=rng, dtype=torch.float64) for s in [(2, 5, 3), (3,), (3,)])
    expected = torch.empty_like(g)
    for h in range(3):
        expected[..., h] = -torch.exp(A_log[h]) * torch.log1p(torch.exp(g[..., h] + dt_bias[h]))
    assert torch.allclose(gdn_gate(g, A_log, dt_bias), expected)


@pytest.mark.parametrize("lower_bound", [None, -5.0])
@pytest.mark.parametrize("bias", ["flat", "matrix", None])
def test_kda_gate(rng, lower_bound, bias):
    HV, K = 3, 4
    g = torch.randn(2, 5, HV, K, generator=rng, dtype=torch.float64)
    A_log = torch.randn(HV, generator=rng, dtype=torch.float64)
    dt = torch.randn(HV, K, generator=rng, dtype=torch.float64)
    dt_bias = {"flat": dt.flatten(), "matrix": dt, None: None}[bias]
    x = g + (0 if bias is None else dt)
    rate = torch.exp(A_log)[:, None]
    if lower_bound is None:
        expected = -rate * torch.log1p(torch.exp(x))
    else:
        expected = lower_bound / (1 + torch.exp(-rate * x))
    out = kda_gate(g, A_log, dt_bias, lower_bound)
    assert torch.allclose(out, expected)
    assert (out <= 0).all() and (lower_bound is None or (out >= lower_bound).all())


def test_gates_compute_in_float32_for_half_inputs(rng):
    g = torch.randn(1, 2, 3, generator=rng).to(torch.bfloat16)
    A_log, dt_bias = torch.randn(2, 3, generator=rng).to(torch.bfloat16)
    assert gdn_gate(g, A_log, dt_bias).dtype == torch.float32

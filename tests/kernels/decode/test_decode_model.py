"""The decode program's algorithm, step for step in float64, against the reference recurrence.

``step`` does what ``programs.decode`` does, in its order: a per-channel decay applied to the
state first, one reduction for Sᵀk, Sᵀq, qᵀk and the norms, the norms applied as scalars after
it, then the delta (or v), the output and the update. Every family's rule is checked on fresh
random inputs, resets (a log decay of -inf) included.
"""

from __future__ import annotations

import pytest
import torch

from tileops.reference import delta_rule_step, kda_gate, l2norm

F64 = torch.float64
EPS = 1e-6


def step(q, k, v, g, beta, state, *, gate: str, delta: bool, scale: float, l2norm_qk: bool):
    """One decode step as the program computes it: q, k [B, H, K]; state [B, H, K, V]."""
    if gate == "channel":
        state = g.exp().unsqueeze(-1) * state
    sk = torch.einsum("bhk,bhkv->bhv", k, state)
    sq = torch.einsum("bhk,bhkv->bhv", q, state)
    qk = (q * k).sum(-1)
    rk = (k.square().sum(-1) + EPS).rsqrt() if l2norm_qk else torch.ones_like(qk)
    rq = (q.square().sum(-1) + EPS).rsqrt() if l2norm_qk else torch.ones_like(qk)
    qk = qk * rk * rq * scale
    decay = g.exp() if gate == "scalar" else torch.ones_like(qk)
    d = (beta.unsqueeze(-1) * (v - (decay * rk).unsqueeze(-1) * sk)) if delta else v
    o = (decay * rq * scale).unsqueeze(-1) * sq + qk.unsqueeze(-1) * d
    new_state = decay[..., None, None] * state + (k * rk.unsqueeze(-1)).unsqueeze(-1) * d.unsqueeze(-2)
    return o, new_state


def inputs(gen, B=3, H=2, K=16, V=16, gate="scalar", resets=False):
    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=F64)
    g = {"none": None, "scalar": -torch.rand(B, H, generator=gen, dtype=F64),
         "channel": torch.nn.functional.logsigmoid(randn(B, H, K))}[gate]
    if resets and g is not None:
        g[0, 0] = -torch.inf  # a full reset of one row (every channel)
        if gate == "channel":
            g[1, 1, :3] = -torch.inf  # three channels of another
    return randn(B, H, K), randn(B, H, K), randn(B, H, V), g, torch.rand(B, H, generator=gen, dtype=F64), randn(B, H, K, V)


def relative(a, b):
    return ((a - b).norm() / b.norm()).item()


RULES = [("none", True), ("scalar", True), ("channel", True), ("channel", False)]


@pytest.mark.parametrize("gate,delta,resets", [(g, d, r) for g, d in RULES for r in (False, True)
                                               if not (r and g == "none")])  # no gate, nothing to reset
@pytest.mark.parametrize("l2norm_qk", [False, True])
def test_the_programs_step_is_the_recurrence(rng, gate, delta, l2norm_qk, resets):
    q, k, v, g, beta, state = inputs(rng, gate=gate, resets=resets)
    scale = 0.3
    o, new_state = step(q, k, v, g, beta, state, gate=gate, delta=delta, scale=scale, l2norm_qk=l2norm_qk)
    rq, rk = (l2norm(q), l2norm(k)) if l2norm_qk else (q, k)
    ref_o, ref_state = delta_rule_step(rq, rk, v, beta if delta else None, state, g, scale=scale)
    assert torch.isfinite(o).all() and torch.isfinite(new_state).all()
    assert relative(o, ref_o) < 1e-13 and relative(new_state, ref_state) < 1e-13


def test_a_reset_forgets_the_state_exactly(rng):
    q, k, v, g, beta, state = inputs(rng, gate="channel")
    g[:] = -torch.inf
    o, new_state = step(q, k, v, g, beta, state, gate="channel", delta=True, scale=1.0, l2norm_qk=False)
    fresh_o, fresh_state = step(q, k, v, torch.zeros_like(g), beta, torch.zeros_like(state), gate="channel",
                                delta=True, scale=1.0, l2norm_qk=False)
    assert torch.equal(o, fresh_o) and torch.equal(new_state, fresh_state)


def channel_gate(x, a_log, lower_bound):
    """The program's in-kernel per-channel gate, in float64."""
    if lower_bound is not None:
        return lower_bound * torch.sigmoid(torch.where(x == 0, 0, a_log.exp() * x))
    log_softplus = torch.where(x < -20, x, torch.where(x > 20, x.log(), torch.log1p(x.exp()).log()))
    return -(a_log + log_softplus).exp()


@pytest.mark.parametrize("lower_bound", [None, -5.0])
def test_the_in_kernel_channel_gate_is_kdas_and_never_nan(rng, lower_bound):
    H, K = 3, 8
    x = torch.randn(2, 1, H, K, generator=rng, dtype=F64) * 30
    x[0, 0, 0, :3] = torch.tensor([0.0, -torch.inf, torch.inf])
    a_log = torch.tensor([0.5, 95.0, -3.0], dtype=F64)  # e^95 overflows float32
    ours = channel_gate(x, a_log.view(H, 1), lower_bound)
    ref = kda_gate(x, a_log, None, lower_bound)
    assert not ours.isnan().any()
    both_inf = torch.isinf(ours) & torch.isinf(ref)
    assert torch.equal(both_inf, torch.isinf(ref))
    assert torch.allclose(ours[~both_inf], ref[~both_inf], rtol=1e-12, atol=0)

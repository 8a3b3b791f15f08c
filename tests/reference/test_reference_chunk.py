"""The chunked forms against the definition, in float64, including the chunk ops' extra outputs."""

import itertools

import pytest
import torch

from tileops.reference import chunk_delta_rule, chunk_gla, deltanet_chunk_forward, recurrent_delta_rule
from tileops.tuner.gate import relative_error as rel

FAMILIES = {"deltanet": (None, True), "gdn": ("scalar", True), "kda": ("channel", True), "gla": ("channel", False)}
TOL = 1e-10


def random_state(rng, *shape):
    return torch.randn(*shape, generator=rng, dtype=torch.float64)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("chunk_size", [16, 32, 64])
@pytest.mark.parametrize("length", [1, 37, 100])
def test_chunked_equals_recurrence(make_inputs, rng, family, chunk_size, length):
    gate, delta = FAMILIES[family]
    x = make_inputs(2, length, 2, 8, 6, gate=gate, delta=delta)
    state = random_state(rng, 2, 2, 8, 6)
    o_ref, final_ref = recurrent_delta_rule(**x, scale=0.35, initial_state=state)
    o, final = chunk_delta_rule(**x, scale=0.35, initial_state=state, chunk_size=chunk_size)
    assert rel(o, o_ref) < TOL and rel(final, final_ref) < TOL


@pytest.mark.parametrize("group", [1, 2, 4])
def test_gdn_value_heads(make_inputs, rng, group):
    x = make_inputs(2, 45, 2, 8, 6, gate="scalar", value_heads=2 * group)
    state = random_state(rng, 2, 2 * group, 8, 6)
    o_ref, final_ref = recurrent_delta_rule(**x, scale=0.35, initial_state=state)
    o, final = chunk_delta_rule(**x, scale=0.35, initial_state=state, chunk_size=16)
    assert rel(o, o_ref) < TOL and rel(final, final_ref) < TOL


@pytest.mark.parametrize("chunk_size", [1, 3, 7])
def test_any_chunk_size(make_inputs, chunk_size):
    x = make_inputs(1, 20, 1, 4, 4, gate="channel", value_heads=2)
    o_ref, final_ref = recurrent_delta_rule(**x, scale=0.5)
    o, final = chunk_delta_rule(**x, scale=0.5, chunk_size=chunk_size)
    assert rel(o, o_ref) < TOL and rel(final, final_ref) < TOL


@pytest.mark.parametrize("family", ["kda", "gla"])
def test_speed_knobs_keep_the_result(make_inputs, rng, family):
    gate, delta = FAMILIES[family]
    x = make_inputs(1, 40, 2, 8, 4, gate=gate, delta=delta)
    state = random_state(rng, 1, 2, 8, 4)
    o_ref, final_ref = recurrent_delta_rule(**x, scale=0.5, initial_state=state)
    for chunk_size, solve, subchunk in itertools.product([16, 32], ["triangular", "substitution"], [1, 4, 5, 64]):
        o, final = chunk_delta_rule(**x, scale=0.5, initial_state=state, chunk_size=chunk_size, solve=solve,
                                    subchunk=subchunk)
        assert rel(o, o_ref) < TOL and rel(final, final_ref) < TOL, (chunk_size, solve, subchunk)


@pytest.mark.parametrize("family", FAMILIES)
def test_varlen_equals_each_sequence_alone(make_inputs, rng, family):
    gate, delta = FAMILIES[family]
    bounds = [0, 23, 24, 60, 77]
    x = make_inputs(1, bounds[-1], 2, 8, 4, gate=gate, value_heads=4, delta=delta)
    states = random_state(rng, 4, 4, 8, 4)
    o, final = chunk_delta_rule(**x, scale=0.5, initial_state=states, cu_seqlens=torch.tensor(bounds),
                                chunk_size=16)
    for n, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        part = {name: None if t is None else t[:, start:end] for name, t in x.items()}
        o_n, final_n = recurrent_delta_rule(**part, scale=0.5, initial_state=states[n:n + 1])
        assert rel(o[:, start:end], o_n) < TOL and rel(final[n:n + 1], final_n) < TOL


def test_no_state_is_zero_state(make_inputs):
    x = make_inputs(2, 30, 1, 8, 4, gate="channel")
    zeros = torch.zeros(2, 1, 8, 4, dtype=torch.float64)
    o, final = chunk_delta_rule(**x, scale=0.5, chunk_size=16)
    o_ref, final_ref = chunk_delta_rule(**x, scale=0.5, chunk_size=16, initial_state=zeros)
    assert torch.equal(o, o_ref) and torch.equal(final, final_ref)


@pytest.mark.parametrize("family", ["kda", "gla"])
def test_steep_decays_do_not_overflow(make_inputs, family):
    """Decays near exp(−20) per token: a factored exp(γ_i)·exp(−γ_j) would overflow float32."""
    gate, delta = FAMILIES[family]
    x = make_inputs(1, 128, 1, 8, 4, gate=gate, delta=delta)
    x["g"] = -20 * torch.rand_like(x["g"])
    o_ref, final_ref = recurrent_delta_rule(**x, scale=0.5)
    x32 = {name: None if t is None else t.float() for name, t in x.items()}
    o, final = chunk_delta_rule(**x32, scale=0.5, chunk_size=128, subchunk=16)
    assert torch.isfinite(o).all() and rel(o.double(), o_ref) < 1e-4 and rel(final.double(), final_ref) < 1e-4


@pytest.mark.parametrize("length", [37, 64])
def test_deltanet_chunk_forward(make_inputs, length):
    B, H, K, V, C = 2, 2, 8, 6, 16
    x = make_inputs(B, length, H, K, V)
    q, k, v = (x[n].transpose(1, 2) for n in ("q", "k", "v"))
    beta = x["beta"].transpose(1, 2)
    o, S, Aw, Au, w, u = deltanet_chunk_forward(q, k, v, beta, chunk_size=C)
    n_chunks = -(-length // C)
    assert o.shape == (B, H, length, V) and S.shape == (B, H, n_chunks + 1, K, V)
    assert Aw.shape == Au.shape == (B, H, length, C) and w.shape == (B, H, length, K) and u.shape == (B, H, length, V)
    assert torch.equal(Aw, Au) and Aw.data_ptr() != Au.data_ptr()

    o_ref, _ = recurrent_delta_rule(x["q"], x["k"], x["v"], x["beta"], scale=1.0)
    assert rel(o, o_ref.transpose(1, 2)) < TOL
    assert not S[:, :, 0].any()
    for c in range(1, n_chunks + 1):
        end = min(c * C, length)
        prefix = {name: t[:, :end] for name, t in x.items() if t is not None}
        _, state = recurrent_delta_rule(**prefix, scale=1.0)
        assert rel(S[:, :, c], state) < TOL

    for start in range(0, length, C):
        end = min(start + C, length)
        rows = slice(start, end)
        T = Aw[:, :, rows, :end - start]
        kk = k[:, :, rows] @ k[:, :, rows].mT
        A = (beta[:, :, rows, None] * kk).tril(-1)
        eye = torch.eye(end - start, dtype=torch.float64)
        assert rel(T @ (eye + A), eye.expand_as(T)) < TOL
        assert not Aw[:, :, rows, end - start:].any()
        assert rel(w[:, :, rows], T @ (beta[:, :, rows, None] * k[:, :, rows])) < TOL
        assert rel(u[:, :, rows], T @ (beta[:, :, rows, None] * v[:, :, rows])) < TOL


def test_deltanet_chunk_forward_dtypes(make_inputs):
    x = make_inputs(1, 20, 1, 8, 8, dtype=torch.bfloat16)
    outs = deltanet_chunk_forward(*(x[n].transpose(1, 2) for n in ("q", "k", "v", "beta")), chunk_size=16)
    assert [t.dtype for t in outs] == [torch.bfloat16, torch.float32] + [torch.bfloat16] * 4


@pytest.mark.parametrize("length", [1, 50])
@pytest.mark.parametrize("with_state", [False, True])
def test_chunk_gla(make_inputs, rng, length, with_state):
    C = 16
    x = make_inputs(2, length, 2, 8, 4, gate="channel", delta=False)
    state = random_state(rng, 2, 2, 8, 4) if with_state else None
    q, k, v, g = x["q"], x["k"], x["v"], x["g"]
    o, final, h = chunk_gla(q, k, v, g, scale=0.4, initial_state=state, chunk_size=C)
    o_ref, final_ref = recurrent_delta_rule(q, k, v, None, g, scale=0.4, initial_state=state)
    assert rel(o, o_ref) < TOL and rel(final, final_ref) < TOL
    n_chunks = -(-length // C)
    assert h.shape == (2, n_chunks + 1, 2, 8, 4) and h.is_contiguous()
    assert torch.equal(h[:, 0], torch.zeros_like(h[:, 0]) if state is None else state)
    for c in range(1, n_chunks + 1):
        end = min(c * C, length)
        _, state_c = recurrent_delta_rule(q[:, :end], k[:, :end], v[:, :end], None, g[:, :end], scale=0.4,
                                          initial_state=state)
        assert rel(h[:, c], state_c) < TOL


def test_chunk_gla_varlen_has_no_h(make_inputs):
    x = make_inputs(1, 30, 2, 8, 4, gate="channel", delta=False)
    cu = torch.tensor([0, 1, 17, 30])
    o, final, h = chunk_gla(x["q"], x["k"], x["v"], x["g"], scale=0.4, cu_seqlens=cu, chunk_size=16)
    o_ref, final_ref = recurrent_delta_rule(x["q"], x["k"], x["v"], None, x["g"], scale=0.4, cu_seqlens=cu)
    assert h is None and rel(o, o_ref) < TOL and rel(final, final_ref) < TOL

"""GLA's chunked backward as its kernels are to compute it (``chunk_bwd_model``), in float64, against
torch.autograd through the naive recurrence: under every gate kind, with and without an initial
state and a final-state gradient. The model reads the forward's h; a stale h shows."""

from __future__ import annotations

import pytest
import torch

from tileops.reference.gla.chunk import chunk_gla
from tileops.reference.gla.naive import recurrent_gla
from tests.kernels.gla.chunk_bwd_model import C, F64, chunk_bwd
from tests.kernels.kda.test_kda_prefill_model import GATES, gates, relative


def call(kind: str, with_state: bool, with_dht: bool, seed: int = 5):
    gen = torch.Generator().manual_seed(seed)
    B, T, H, D = 2, 3 * C, 2, 32
    q = torch.randn(B, T, H, D, generator=gen, dtype=F64)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, D, generator=gen, dtype=F64), dim=-1)
    v = torch.randn(B, T, H, D, generator=gen, dtype=F64)
    g = gates(kind, (B, T, H, D), gen)
    h0 = torch.randn(B, H, D, D, generator=gen, dtype=F64) if with_state else None
    do = torch.randn(B, T, H, D, generator=gen, dtype=F64)
    dht = torch.randn(B, H, D, D, generator=gen, dtype=F64) if with_dht else None
    return q, k, v, g, h0, do, dht


def autograd_grads(q, k, v, g, h0, do, dht, scale):
    inputs = [x.clone().requires_grad_() for x in (q, k, v, g)]
    o, final = recurrent_gla(*inputs, scale=scale, initial_state=h0)
    loss = (o * do).sum() + (0.0 if dht is None else (final * dht).sum())
    return torch.autograd.grad(loss, inputs)


@pytest.mark.parametrize("fold", [False, True], ids=["blocks", "fold"])
@pytest.mark.parametrize("kind", GATES)
@pytest.mark.parametrize("with_state, with_dht", [(True, True), (False, False), (False, True)],
                         ids=["state-dht", "neither", "dht"])
def test_the_chunked_backward_is_the_recurrences_gradient(kind, with_state, with_dht, fold):
    scale = 0.3
    q, k, v, g, h0, do, dht = call(kind, with_state, with_dht)
    _, _, h = chunk_gla(q, k, v, g, scale=scale, initial_state=h0, chunk_size=C)
    ours = chunk_bwd(q, k, v, g, h, do, dht, scale=scale, fold=fold)
    expected = autograd_grads(q, k, v, g, h0, do, dht, scale)
    for name, x, y in zip(("dq", "dk", "dv"), ours, expected):
        assert relative(x, y) <= 1e-12, (name, relative(x, y))
    # dg sums q ⊙ dq − k ⊙ dk down the sequence, terms that cancel: under steep gates (8 to 16 a
    # token) to a millionth of their size. Both sides then differ by float64's rounding of the terms.
    dq, dk, dg = expected[0], expected[1], expected[3]
    terms = ((q * dq).abs() + (k * dk).abs()).flip(1).cumsum(1).flip(1)
    assert (ours[3] - dg).norm() <= 1e-12 * dg.norm() + 1e-15 * terms.norm(), ("dg", relative(ours[3], dg))


def test_the_backward_reads_the_forwards_states():
    q, k, v, g, h0, do, dht = call("mamba", True, True)
    _, _, h = chunk_gla(q, k, v, g, scale=0.3, initial_state=h0, chunk_size=C)
    stale = h.clone()
    stale[:, 1] *= 1.01
    good, bad = chunk_bwd(q, k, v, g, h, do, dht, scale=0.3), chunk_bwd(q, k, v, g, stale, do, dht, scale=0.3)
    assert relative(bad[0], good[0]) > 1e-4  # dq reads S_c


@pytest.mark.parametrize("later", [False, True], ids=["dq", "dk"])
def test_the_gated_sums_stay_finite_in_fp32_under_the_strongest_gates(later):
    """γ falls to about −160 down a chunk at −5 a token: e^{−γ} alone overflows fp32, the
    block form's factors (all at most 1) do not."""
    from tests.kernels.gla.chunk_bwd_model import gated_rows

    gen = torch.Generator().manual_seed(9)
    d_a = torch.randn(2, C, C, generator=gen, dtype=F64).tril()
    x = torch.randn(2, C, 32, generator=gen, dtype=F64)
    gamma = (-5 * torch.rand(2, C, 32, generator=gen, dtype=F64)).cumsum(1)
    assert (-gamma.float()).exp().isinf().any()
    exact = gated_rows(d_a, x, gamma, later=later)
    single = gated_rows(d_a.float(), x.float(), gamma.float(), later=later)
    assert single.isfinite().all() and relative(single.to(F64), exact) <= 1e-5


@pytest.mark.parametrize("rounding", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_dg_errs_as_little_as_dq_when_every_term_takes_the_same_rounded_ds(rounding):
    """On the GPU tests' inputs (unit q and k, gates uniform down to −1 or −5 a token), with the
    kernels' 16-bit operands all four gradients stay within twice the dtype's rounding. dg sums
    differences of nearly equal terms (q ⊙ dq − k ⊙ dk down the chunk, plus S_{c+1} ⊙ dS_{c+1}
    past it): they cancel as exactly when dS_{c+1} is rounded alike in each, as the walk stores
    it; with dS in fp32 in the last term alone, dg erred several times more than dq (up to 17)."""
    gen = torch.Generator().manual_seed(0)
    B, T, H, D, scale = 1, 512, 2, 64, 0.125
    worst = {}
    for strength in (1.0, 5.0):
        q, k = (torch.nn.functional.normalize(torch.randn(B, T, H, D, generator=gen, dtype=F64), dim=-1)
                for _ in range(2))
        v, do = (torch.randn(B, T, H, D, generator=gen, dtype=F64) for _ in range(2))
        g = -strength * torch.rand(B, T, H, D, generator=gen, dtype=F64)
        dht = torch.randn(B, H, D, D, generator=gen, dtype=F64)
        q, k, v, g, do = (x.to(rounding).to(F64) for x in (q, k, v, g, do))
        _, _, h = chunk_gla(q, k, v, g, scale=scale, chunk_size=C)
        exact = chunk_bwd(q, k, v, g, h, do, dht, scale=scale)
        rounded = chunk_bwd(q, k, v, g, h.float().to(F64), do, dht, scale=scale, rounding=rounding,
                            fold=rounding == torch.bfloat16)
        for name, x, y in zip(("dq", "dk", "dv", "dg"), rounded, exact):
            worst[name] = max(worst.get(name, 0.0), relative(x, y))
    assert max(worst.values()) <= 2 * torch.finfo(rounding).eps, worst


@pytest.mark.parametrize("kind", ["benchmark", "weak", "mamba", "zero", "steep"])
@pytest.mark.parametrize("later", [False, True], ids=["dq", "dk"])
def test_the_folded_sums_keep_about_16_bits_where_the_chunk_fits(kind, later):
    """On the same bf16 dA, the fold's operand in two bf16 parts lands within 2e-5 of the exact sum
    (one bf16 part: about 2e-3, the blocks' bf16 operands about 1e-3; bench/studies/gla_grads_fold.py);
    steep gates fit no chunk and keep the blocks' form."""
    from tests.kernels.gla.chunk_bwd_model import folded_rows, gated_rows

    gen = torch.Generator().manual_seed(2)
    d_a = torch.randn(8, C, C, generator=gen, dtype=F64).tril().to(torch.bfloat16).to(F64)
    x = torch.randn(8, C, 128, generator=gen, dtype=F64)
    gamma = gates(kind, (8, C, 128), gen).cumsum(1)
    exact = gated_rows(d_a, x, gamma, later=later)
    fits, folded = folded_rows(d_a, x, gamma, later=later, rounding=torch.bfloat16)
    if kind == "steep":
        assert not fits.any()
        return
    assert fits.any()
    assert relative(folded[fits], exact[fits]) <= 2e-5

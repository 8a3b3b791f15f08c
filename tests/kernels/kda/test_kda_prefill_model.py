"""KDA's two-pass prefill, step for step in float64 (``prefill_model``), against the reference
recurrence: under every gate kind the benchmarks draw, gates down to KDA's lower bound of −5 a
token and beyond it, for equal lengths, packed sequences of lengths that are not multiples of 64 (several in
one window), an initial state and value heads sharing key heads; and with the GPU's operand
roundings, how far each token dtype lands from it."""

from __future__ import annotations

import pytest
import torch

from tileops.cases import GATE_KINDS, log_decays
from tileops.reference import recurrent_delta_rule
import math

from tileops.kernels.blocks.window_fold import FOLD_REACH
from tests.kernels.kda.prefill_model import (C, F64, blocks_form, chain, first_pass, fold_decayed, fold_midpoints,
                                             window_fold)

GATES = GATE_KINDS + ("strong",)  # "steep" puts every block's in-block pairs on the one-by-one form


def gates(kind: str, shape: tuple, gen: torch.Generator) -> torch.Tensor:
    """Per-channel log decays: the benchmarks' kinds or uniform in (−5, 0) (``strong``)."""
    if kind == "strong":
        return -5 * torch.rand(shape, generator=gen, dtype=F64)
    return log_decays(kind, shape, lambda s: torch.randn(s, generator=gen, dtype=F64),
                      lambda s: torch.rand(s, generator=gen, dtype=F64), 16.0).to(F64)


def call(lengths, heads=2, value_heads=4, dim=32, kind="mamba", seed=0, with_state=True):
    gen = torch.Generator().manual_seed(seed)
    tokens = sum(lengths)
    q = torch.randn(1, tokens, heads, dim, generator=gen, dtype=F64)
    k = torch.nn.functional.normalize(torch.randn(1, tokens, heads, dim, generator=gen, dtype=F64), dim=-1)
    v = torch.randn(1, tokens, value_heads, dim, generator=gen, dtype=F64)
    g = gates(kind, (1, tokens, value_heads, dim), gen)
    beta = torch.rand(1, tokens, value_heads, generator=gen, dtype=F64)
    h0 = torch.randn(len(lengths), value_heads, dim, dim, generator=gen, dtype=F64) if with_state else None
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    return q, k, v, g, beta, h0, bounds


def model(q, k, v, g, beta, h0, bounds, scale, rounding=None):
    group = v.shape[2] // q.shape[2]
    per_head = [x[0].repeat_interleave(group, dim=1) for x in (q, k)]
    first = first_pass(*per_head, g[0], None if beta is None else beta[0], bounds, scale=scale, rounding=rounding)
    return chain(first, v[0], bounds, h0, rounding=rounding)


def reference(q, k, v, g, beta, h0, bounds, scale):
    o, final = recurrent_delta_rule(q, k, v, beta, g, scale=scale, initial_state=h0,
                                    cu_seqlens=torch.tensor(bounds))
    return o[0], final


def relative(x, y):
    return ((x - y).norm() / y.norm()).item()


@pytest.mark.parametrize("kind", GATES)
@pytest.mark.parametrize("lengths", [(200,), (37, 64, 100, 5, 130), (128, 128)], ids=["one", "packed", "equal"])
def test_the_schedule_is_the_recurrence(kind, lengths):
    """Exact in float64 (≤ 1e-12) whatever the gates: no pair crosses a sequence, no factor
    overflows, every segment's state decays by its own row."""
    args = call(lengths, kind=kind)
    o, final = model(*args, scale=0.3)
    ref_o, ref_final = reference(*args, scale=0.3)
    assert relative(o, ref_o) <= 1e-12
    assert relative(final, ref_final) <= 1e-12


def test_a_full_reset_inside_a_block_is_exact():
    """A log decay of −inf (floored in the kernel) forgets everything before it, across the blocks
    met about a reference and inside one."""
    q, k, v, g, beta, h0, bounds = call((150,), kind="mamba")
    g[0, 70, :, :5] = float("-inf")
    g[0, 100] = float("-inf")
    o, final = model(q, k, v, g, beta, h0, bounds, scale=0.3)
    ref_o, ref_final = reference(q, k, v, g, beta, h0, bounds, scale=0.3)
    assert relative(o, ref_o) <= 1e-12 and relative(final, ref_final) <= 1e-12


@pytest.mark.parametrize("dtype, bound", [(torch.bfloat16, 2e-2), (torch.float16, 3e-3)])
@pytest.mark.parametrize("kind", ["strong", "mamba", "weak", "steep"])
@pytest.mark.parametrize("family", ["kda", "gla"])
def test_operand_roundings_stay_within_the_gpu_tests_tolerance(dtype, bound, kind, family):
    """The roundings the GPU makes, on inputs rounded to the token dtype, against the reference on
    the same rounded inputs: the GPU tests' tolerance (``test_kda_prefill_gpu``,
    ``test_gla_prefill_gpu``) holds with room."""
    q, k, v, g, beta, h0, bounds = call((37, 300, 70), dim=64, kind=kind, seed=3)
    if family == "gla":
        beta = None
    q, k, v = (x.to(dtype).to(F64) for x in (q, k, v))
    o, final = model(q, k, v, g, beta, h0, bounds, scale=64 ** -0.5, rounding=dtype)
    ref_o, ref_final = reference(q, k, v, g, beta, h0, bounds, scale=64 ** -0.5)
    assert relative(o, ref_o) <= bound / 2
    assert relative(final, ref_final) <= bound / 2


@pytest.mark.parametrize("kind", GATES)
@pytest.mark.parametrize("lengths", [(200,), (37, 64, 100, 5, 130)], ids=["one", "packed"])
def test_without_the_delta_rule_the_schedule_is_gla(kind, lengths):
    """GLA's plain gated sum through the same passes (no β, no solve, Δ = V): the reference's
    GLA recurrence to ≤ 1e-12."""
    q, k, v, g, _, h0, bounds = call(lengths, value_heads=2, kind=kind)
    o, final = model(q, k, v, g, None, h0, bounds, scale=0.3)
    ref_o, ref_final = reference(q, k, v, g, None, h0, bounds, scale=0.3)
    assert relative(o, ref_o) <= 1e-12
    assert relative(final, ref_final) <= 1e-12


@pytest.mark.parametrize("kind", GATES)
def test_the_whole_window_fold_where_the_gates_allow_it(kind):
    """Under the benchmark's, weak, zero and Mamba-initialised gates (nearly) every window takes the
    one fold, and with the GPU's operand roundings its K Kᵀ and Q Kᵀ land at least ten times closer
    to float64 than the blocks' form; under steep and strong gates (spans past 2^±FOLD_REACH) no
    window does. 32 heads of one window, K = 128."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(32, C, 128, generator=gen, dtype=F64)
    k = torch.nn.functional.normalize(torch.randn(32, C, 128, generator=gen, dtype=F64), dim=-1)
    gamma = gates(kind, (32, C, 128), gen).cumsum(1)
    seg = torch.zeros(C, dtype=torch.long)
    fits, a_fold, m_fold = window_fold(q, k, gamma, seg, torch.bfloat16)
    if kind in ("steep", "strong"):
        assert not fits.any()
        return
    assert fits.float().mean() >= 0.9
    lower = torch.ones(C, C, dtype=torch.bool).tril()
    pair = (gamma[:, :, None, :] - gamma[:, None, :, :]).clamp(max=0).exp()
    a_blocks, m_blocks = blocks_form(q, k, gamma, seg, torch.bfloat16)
    for x, fold, blocks in ((k, a_fold, a_blocks), (q, m_fold, m_blocks)):
        exact = torch.einsum("hic,hjc,hijc->hij", x, k, pair)[fits]
        fold_error = relative(torch.where(lower, fold[fits], 0.0), torch.where(lower, exact, 0.0))
        blocks_error = relative(torch.where(lower, blocks[fits], 0.0), torch.where(lower, exact, 0.0))
        assert fold_error <= blocks_error / 10, (fold_error, blocks_error)


def test_glas_decayed_operands_out_of_the_fold_keep_fp32_precision():
    """GLA's Q_o and K_s as the fold's fill forms them, in fp32 (γ − ρ rounded, then q̃ ⊙ e^ρ and
    k̃ ⊙ e^{γ_end − ρ}), against float64 over the fold's whole reach (half-spans up to FOLD_REACH,
    base 2) and first rows down to e^-40, fp32's subnormals flushed as the GPU's exp2 flushes them:
    each element within 2^-15 of itself (γ in fp32 alone costs 2^-16), 1/64 of its bf16 rounding,
    but for what fp32 cannot hold: where e^ρ underflows, every row of the channel lies below 2^-26
    and is lost (2^-26 of the input at most)."""
    gen = torch.Generator().manual_seed(2)
    heads, dim = 16, 128
    span = torch.rand(heads, 1, dim, generator=gen, dtype=F64) * 2 * FOLD_REACH * math.log(2)
    steps = torch.rand(heads, C, dim, generator=gen, dtype=F64)
    steps[:, 0] = 0.0
    first = -40 * torch.rand(heads, 1, dim, generator=gen, dtype=F64)
    gamma = first - steps.cumsum(1) / steps.sum(1, keepdim=True) * span
    fits, rho = fold_midpoints(gamma, torch.zeros(C, dtype=torch.long))
    assert fits.all()
    q, k = (torch.randn(heads, C, dim, generator=gen, dtype=F64) for _ in range(2))
    end_row = torch.full((C,), C - 1)
    exact = 0.3 * q * gamma.exp(), k * (gamma[:, end_row] - gamma).exp()
    assert torch.set_flush_denormal(True), "this CPU cannot flush fp32's subnormals"
    try:
        ours = fold_decayed(*(x.float() for x in (q, k, gamma, rho)), end_row, 0.3)
        lost = rho.float().exp() == 0
    finally:
        torch.set_flush_denormal(False)
    assert lost.any() and (~lost).any()
    for x, want, got in zip((0.3 * q, k), exact, ours):
        error = (got.double() - want).abs()
        assert (error <= 2 ** -15 * want.abs() + 2 ** -26 * x.abs()).all()
        held = ~lost.expand_as(want) & (want.abs() >= 2 ** -120)
        assert (error[held] <= 2 ** -15 * want.abs()[held]).all()

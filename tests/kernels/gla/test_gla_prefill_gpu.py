"""tl.gla_prefill on an sm90 GPU against the float64 reference: GLAFwdOp's prefill, equal lengths and
packed varlen (lengths not multiples of 64, a thousand short sequences, one long one), few long
sequences cut into pieces, with and without an initial state, K = V ∈ {64, 128}, fp16 and bf16, a given scale, under gates from weak
to −16 a token; and every config of the space."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tileops.callspec import CallSpec, make_flags
from tileops.kernels.channel_prefill_kernel import ChannelPrefillConfig
from tileops.kernels.gla.prefill import KERNEL
from tileops.kernels.plans.channel_pieces import piece_windows
from tileops.linear_attention import GLAFwdOp
from tileops.tuner.gate import in_float64, relative_error
from tests.kernels.graph_replay import replays_as_eager

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                       reason="needs an sm90 (Hopper) GPU"),
]

# As KDA's (tests/kernels/kda/test_kda_prefill_model.py models both families' roundings).
TOL = {torch.bfloat16: 2e-2, torch.float16: 3e-3}


def inputs(seed, lengths, H, D, dtype, *, batch=None, init=True, strength=1.0, gate16=False, device="cuda"):
    """Packed ``lengths`` (B = 1), or ``batch`` equal sequences of lengths[0]; log decays
    −strength · uniform(0, 1) a token, in fp32 or (``gate16``) the input dtype."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device)
    B, T = (1, sum(lengths)) if batch is None else (batch, lengths[0])
    q, k, v = F.normalize(randn(B, T, H, D), dim=-1), F.normalize(randn(B, T, H, D), dim=-1), randn(B, T, H, D)
    g = -strength * torch.rand(B, T, H, D, generator=gen, device=device)
    n = B if batch is not None else len(lengths)
    h0 = randn(n, H, D, D) * 0.1 if init else None
    cu = None
    if batch is None:
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    return [x.to(dtype) for x in (q, k, v)] + [g.to(dtype) if gate16 else g], h0, cu


def check(scale, tensors, h0, cu, dtype, launch=None):
    q, k, v, g = tensors
    args = (q, k, v, g, h0, cu, None if cu is None else cu.cpu())
    ours = (launch or GLAFwdOp(scale=scale))(*args)
    ref = GLAFwdOp(scale=scale, target="reference")(*in_float64(args))
    errors = [relative_error(x, y) for x, y in zip(ours, ref)]
    print(f"gla prefill {dtype} scale={scale}: o {errors[0]:.2e}, state {errors[1]:.2e}")
    assert max(errors) <= TOL[dtype], errors


FEATURES = [
    dict(id="bf16-k128-equal", dtype=torch.bfloat16, H=4, D=128, lengths=(300,), batch=3),
    dict(id="fp16-k64-equal-no-state", dtype=torch.float16, H=2, D=64, lengths=(256,), batch=2, init=False),
    dict(id="bf16-k64-packed", dtype=torch.bfloat16, H=2, D=64, lengths=(37, 64, 200, 5, 130)),
    dict(id="fp16-k128-packed-scale", dtype=torch.float16, H=2, D=128, lengths=(100, 333), scale=0.3),
    dict(id="bf16-k128-strongest-gates", dtype=torch.bfloat16, H=2, D=128, lengths=(257,), strength=5.0),
    dict(id="fp16-k64-weak-gates", dtype=torch.float16, H=2, D=64, lengths=(257,), strength=2e-3),
    dict(id="bf16-k128-steep-gates", dtype=torch.bfloat16, H=2, D=128, lengths=(37, 300, 70), strength=16.0),
    # g in the input dtype, as the specification has it: read as it comes, no fp32 copy
    dict(id="bf16-k128-packed-16-bit-gate", dtype=torch.bfloat16, H=2, D=128, lengths=(37, 300, 70), gate16=True),
    dict(id="fp16-k64-16-bit-gate-no-state", dtype=torch.float16, H=2, D=64, lengths=(200,), batch=2, init=False,
         gate16=True),
]


@pytest.mark.parametrize("case", FEATURES, ids=[c["id"] for c in FEATURES])
def test_every_feature_against_float64(case):
    case = dict(case)
    case.pop("id")
    dtype, H, D, lengths = (case.pop(n) for n in ("dtype", "H", "D", "lengths"))
    scale = case.pop("scale", None)
    check(scale, *inputs(0, lengths, H, D, dtype, **case), dtype)


CUT = [  # few long sequences, cut into pieces of 16 windows (tileops.kernels.plans.channel_pieces)
    dict(id="bf16-k128-h0", dtype=torch.bfloat16, D=128, lengths=(4096,), batch=1),
    dict(id="fp16-k64-slow-decay", dtype=torch.float16, D=64, lengths=(4096,), batch=1, strength=2e-3),
    dict(id="bf16-k128-b2-fast-decay-zeros", dtype=torch.bfloat16, D=128, lengths=(4000,), batch=2, strength=5.0,
         init=False),
    dict(id="bf16-k128-long-prompt-among-short", dtype=torch.bfloat16, D=128, lengths=(37, 4133, 300, 5)),
]


@pytest.mark.parametrize("case", CUT, ids=[c["id"] for c in CUT])
def test_few_long_sequences_cut_into_pieces(case):
    from tileops import dispatch

    case = dict(case)
    case.pop("id")
    dtype, D, lengths = case.pop("dtype"), case.pop("D"), case.pop("lengths")
    tensors, h0, cu = inputs(3, lengths, 2, D, dtype, **case)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert piece_windows(lengths * case.get("batch", 1), 64, 2 * (D // 64), sms) == 16  # the premise: a cut
    if cu is None:  # the plan says so; a packed call is cut only once its lengths reach the host
        spec, _ = GLAFwdOp().describe(*tensors, h0)
        assert "pieces of 16 windows" in dispatch.explain_spec("GLAFwdOp", None, spec).plan
    check(None, tensors, h0, cu, dtype)


def test_a_cut_call_replays_in_a_cuda_graph():
    tensors, h0, _ = inputs(4, (4096,), 2, 128, torch.bfloat16, batch=1)
    assert replays_as_eager(GLAFwdOp(), *tensors, h0)


def test_a_thousand_short_sequences_and_one_long():
    gen = torch.Generator().manual_seed(1)
    short = tuple(int(n) for n in torch.randint(1, 40, (1000,), generator=gen))
    for lengths in (short, (8191,)):
        check(None, *inputs(2, lengths, 2, 64, torch.bfloat16), torch.bfloat16)


# Every config of the space (a refused one skipped) on a call that ends in cut chunks.
@pytest.mark.parametrize("point", ChannelPrefillConfig.points(),
                         ids=lambda p: f"config-s{p['num_stages']}")
def test_every_config_of_the_space(point):
    lengths = (100, 300, 64)
    call = CallSpec(op="gla", entry="GLAFwdOp", mode="varlen", dtype=torch.bfloat16, device=torch.device("cuda"),
                    arch="sm90", device_name=torch.cuda.get_device_name(), batch=len(lengths), tokens=sum(lengths),
                    heads=2, value_heads=2, dim_k=128, dim_v=128,
                    flags=make_flags(scale=128 ** -0.5, has_initial_state=True, gate_dtype="float32"))  # as inputs() draws g
    try:
        config = KERNEL.validate_config(point, call)
    except ValueError as refused:
        pytest.skip(f"refused: {refused}")
    launch = KERNEL.build(config, call)
    check(None, *inputs(3, lengths, 2, 128, torch.bfloat16), torch.bfloat16, launch=launch)

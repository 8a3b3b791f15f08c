"""tl.kda_prefill on an sm90 GPU against the float64 reference: KDAFwdOp's prefill with every flag
it takes, equal lengths and packed varlen (lengths not multiples of 64, a thousand short sequences,
one long one), an initial state in both layouts, HV a multiple of H, K = V ∈ {64, 128}, fp16 and
bf16, under gates from weak to KDA's lower bound and beyond it (−16 a token); and every config of the space."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tileops.callspec import CallSpec, make_flags
from tileops.kernels.channel_prefill_kernel import ChannelPrefillConfig
from tileops.kernels.kda.prefill import KERNEL
from tileops.linear_attention import KDAFwdOp
from tileops.tuner.gate import in_float64, relative_error
from tests.kernels.graph_replay import replays_as_eager

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                       reason="needs an sm90 (Hopper) GPU"),
]

# The float64 model with the GPU's roundings lands at 3-4e-3 (bf16) and 4-5e-4 (fp16) from the
# reference (tests/kernels/kda/test_kda_prefill_model.py): these leave room for the order of sums.
TOL = {torch.bfloat16: 2e-2, torch.float16: 3e-3}
OP_FLAGS = ("use_qk_l2norm_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval", "state_v_first",
            "use_gate_in_kernel", "lower_bound")


def inputs(seed, lengths, H, HV, D, dtype, *, batch=None, init=True, logits=False, gate=None, bias="flat",
           normed=True, strength=1.0, gate16=False, device="cuda"):
    """Inputs of one call: packed ``lengths`` (B = 1), or ``batch`` equal sequences of lengths[0].
    ``gate``: None for precomputed log decays (−strength · uniform(0, 1) a token, strength 5 being
    KDA's lower bound), else the raw gate for the in-kernel transform with A_log and dt_bias laid
    out as ``bias`` says (flat [HV·K], "grid" [HV, K] or None); g in fp32 or (``gate16``) the
    input dtype."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device)
    B, T = (1, sum(lengths)) if batch is None else (batch, lengths[0])
    q, k = randn(B, T, H, D), randn(B, T, H, D)
    if normed:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    v = randn(B, T, HV, D)
    if gate is None:
        g = -strength * torch.rand(B, T, HV, D, generator=gen, device=device)
        a_log = dt_bias = None
    else:
        g = randn(B, T, HV, D)
        a_log = torch.rand(HV, generator=gen, device=device) * 1.5 - 2.0
        dt_bias = None if bias is None else 0.5 * randn(HV * D)
        if bias == "grid":
            dt_bias = dt_bias.view(HV, D)
    beta = randn(B, T, HV) if logits else torch.rand(B, T, HV, generator=gen, device=device) * 0.8 + 0.1
    n = B if batch is not None else len(lengths)
    h0 = randn(n, HV, D, D) * 0.1 if init else None
    cu = None
    if batch is None:
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    return [x.to(dtype) for x in (q, k, v)] + [g.to(dtype) if gate16 else g, beta], h0, cu, a_log, dt_bias


def check(op_flags, tensors, h0, cu, a_log, dt_bias, dtype, launch=None):
    """Run the op (or ``launch``), then the float64 reference on the same arguments; the worst
    relative error of o and the final state."""
    q, k, v, g, beta = tensors
    args = (q, k, v, g, beta, h0, cu, None if cu is None else cu.cpu(), a_log, dt_bias)
    ours = (launch or KDAFwdOp(**op_flags))(*args)
    ref = KDAFwdOp(**op_flags, target="reference")(*in_float64(args))
    errors = [relative_error(x, y) for x, y in zip(ours, ref)]
    print(f"kda prefill {dtype} {op_flags}: o {errors[0]:.2e}, state {errors[1]:.2e}")
    assert max(errors) <= TOL[dtype], errors
    return errors


FEATURES = [
    dict(id="bf16-k128-equal", dtype=torch.bfloat16, H=4, HV=4, D=128, lengths=(300,), batch=3),
    dict(id="fp16-k64-equal-hv2h", dtype=torch.float16, H=2, HV=4, D=64, lengths=(256,), batch=2, init=False),
    dict(id="bf16-k64-packed", dtype=torch.bfloat16, H=2, HV=4, D=64, lengths=(37, 64, 200, 5, 130)),
    dict(id="fp16-k128-packed-value-first", dtype=torch.float16, H=2, HV=2, D=128, lengths=(100, 333),
         flags=dict(state_v_first=True)),
    dict(id="bf16-k128-l2norm-sigmoid", dtype=torch.bfloat16, H=2, HV=4, D=128, lengths=(190, 70), normed=False,
         logits=True, flags=dict(use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)),
    dict(id="fp16-k64-neg-eigval", dtype=torch.float16, H=2, HV=2, D=64, lengths=(150,), logits=True,
         flags=dict(use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True)),
    dict(id="bf16-k128-gate-flat-bias", dtype=torch.bfloat16, H=2, HV=4, D=128, lengths=(160, 90), gate=True,
         flags=dict(use_gate_in_kernel=True)),
    dict(id="fp16-k64-gate-grid-bias-bound", dtype=torch.float16, H=2, HV=2, D=64, lengths=(210,), gate=True,
         bias="grid", flags=dict(use_gate_in_kernel=True, lower_bound=-5.0)),
    dict(id="bf16-k64-gate-no-bias-bound", dtype=torch.bfloat16, H=1, HV=2, D=64, lengths=(120, 8), gate=True,
         bias=None, flags=dict(use_gate_in_kernel=True, lower_bound=-5.0)),
    dict(id="bf16-k128-strongest-gates", dtype=torch.bfloat16, H=2, HV=2, D=128, lengths=(257,), strength=5.0),
    dict(id="fp16-k128-weak-gates", dtype=torch.float16, H=2, HV=2, D=128, lengths=(257,), strength=2e-3),
    # beyond the bound: most blocks' in-block pairs one by one, the rest on the tensor cores
    dict(id="bf16-k128-steep-gates", dtype=torch.bfloat16, H=2, HV=4, D=128, lengths=(257,), batch=2, strength=16.0),
    dict(id="fp16-k64-steep-gates-mixed-lengths", dtype=torch.float16, H=2, HV=2, D=64, lengths=(37, 64, 200, 5, 130),
         strength=16.0),
    # g in the input dtype, as the specification has it: read as it comes, no fp32 copy
    dict(id="bf16-k128-packed-16-bit-gate", dtype=torch.bfloat16, H=2, HV=4, D=128, lengths=(37, 300, 70), gate16=True),
    dict(id="fp16-k64-16-bit-gate-flat-bias", dtype=torch.float16, H=2, HV=2, D=64, lengths=(160, 90), gate=True,
         gate16=True, flags=dict(use_gate_in_kernel=True)),
]


@pytest.mark.parametrize("case", FEATURES, ids=[c["id"] for c in FEATURES])
def test_every_feature_against_float64(case):
    case = dict(case)
    case.pop("id")
    dtype, H, HV, D, lengths = (case.pop(n) for n in ("dtype", "H", "HV", "D", "lengths"))
    flags = case.pop("flags", {})
    check(flags, *inputs(0, lengths, H, HV, D, dtype, **case), dtype)


CUT = [  # few long sequences, cut into pieces of 16 windows (tileops.kernels.plans.channel_pieces)
    dict(id="bf16-k128-h0", dtype=torch.bfloat16, H=2, HV=2, D=128, lengths=(4096,), batch=1),
    dict(id="fp16-k64-slow-decay-gqa", dtype=torch.float16, H=1, HV=2, D=64, lengths=(4096,), batch=1,
         strength=2e-3),
    dict(id="bf16-k128-b2-fast-decay-zeros", dtype=torch.bfloat16, H=2, HV=2, D=128, lengths=(4000,), batch=2,
         strength=5.0, init=False),
    dict(id="bf16-k128-long-prompt-among-short", dtype=torch.bfloat16, H=2, HV=2, D=128, lengths=(37, 4133, 300, 5)),
    dict(id="fp16-k128-every-transform", dtype=torch.float16, H=2, HV=2, D=128, lengths=(4100,), normed=False,
         logits=True, gate=True, flags=dict(use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                                            allow_neg_eigval=True, use_gate_in_kernel=True, lower_bound=-5.0)),
]


@pytest.mark.parametrize("case", CUT, ids=[c["id"] for c in CUT])
def test_few_long_sequences_cut_into_pieces(case):
    from tileops import dispatch
    from tileops.kernels.plans.channel_pieces import piece_windows

    case = dict(case)
    case.pop("id")
    dtype, H, HV, D, lengths = (case.pop(n) for n in ("dtype", "H", "HV", "D", "lengths"))
    flags = case.pop("flags", {})
    tensors, h0, cu, a_log, dt_bias = inputs(3, lengths, H, HV, D, dtype, **case)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert piece_windows(lengths * case.get("batch", 1), 64, HV * (D // 64), sms, delta=True) == 16  # the premise
    if cu is None:  # the plan says so; a packed call is cut only once its lengths reach the host
        spec, _ = KDAFwdOp(**flags).describe(*tensors, h0, None, None, a_log, dt_bias)
        assert "pieces of 16 windows" in dispatch.explain_spec("KDAFwdOp", None, spec).plan
    check(flags, tensors, h0, cu, a_log, dt_bias, dtype)


def test_a_cut_call_replays_in_a_cuda_graph():
    tensors, h0, _, _, _ = inputs(4, (4096,), 2, 2, 128, torch.bfloat16, batch=1)
    assert replays_as_eager(KDAFwdOp(), *tensors, h0)


def test_a_thousand_short_sequences_and_one_long():
    """Packed calls of many short sequences (several in one window) and of one long one."""
    gen = torch.Generator().manual_seed(1)
    short = tuple(int(n) for n in torch.randint(1, 40, (1000,), generator=gen))
    for lengths in (short, (8191,)):
        check({}, *inputs(2, lengths, 2, 2, 64, torch.bfloat16), torch.bfloat16)


def spec(dtype, H, HV, D, lengths) -> CallSpec:
    return CallSpec(op="kda", entry="KDAFwdOp", mode="varlen", dtype=dtype, device=torch.device("cuda"), arch="sm90",
                    device_name=torch.cuda.get_device_name(), batch=len(lengths), tokens=sum(lengths), heads=H,
                    value_heads=HV, dim_k=D, dim_v=D, flags=make_flags(scale=D ** -0.5, has_initial_state=True,
                                                                        gate_dtype="float32"))  # as inputs() draws g


# Every config of the space (a refused one skipped) on a call that ends in cut chunks.
@pytest.mark.parametrize("point", ChannelPrefillConfig.points(),
                         ids=lambda p: f"config-s{p['num_stages']}")
def test_every_config_of_the_space(point):
    lengths = (100, 300, 64)
    call = spec(torch.bfloat16, 2, 4, 128, lengths)
    try:
        config = KERNEL.validate_config(point, call)
    except ValueError as refused:
        pytest.skip(f"refused: {refused}")
    launch = KERNEL.build(config, call)
    check({}, *inputs(3, lengths, 2, 4, 128, torch.bfloat16), torch.bfloat16, launch=launch)

"""tl.gdn_prefill on an sm90 GPU against the float64 reference recurrence."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tileops.callspec import CallSpec, make_flags
from tileops.kernels.gdn.prefill import GDNPrefillConfig, default, fused_config, refuse
from tileops.linear_attention import GDNFwdOp
from tuner.gate import in_float64, relative_error

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                       reason="needs an sm90 (Hopper) GPU"),
]

TOL = 2e-2  # bf16 / fp16 operands in every product, fp32 accumulation and state


def call_spec(*, mode, dtype, heads, value_heads, dim, batch, tokens, device_name=None, **flags) -> CallSpec:
    """The sm90 call; ``device_name`` defaults to this machine's GPU (given, it needs none)."""
    return CallSpec(op="gdn", entry="GDNFwdOp", mode=mode, dtype=dtype, device=torch.device("cuda"),
                    arch="sm90", device_name=device_name or torch.cuda.get_device_name(), batch=batch, tokens=tokens,
                    heads=heads, value_heads=value_heads, dim_k=dim, dim_v=dim,
                    flags=make_flags(scale=dim ** -0.5, **flags))


def inputs(gen, B, T, H, HV, D, dtype, *, n, init, logits, gate):
    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda")

    q, k = F.normalize(randn(B, T, H, D), dim=-1), F.normalize(randn(B, T, H, D), dim=-1)
    v = randn(B, T, HV, D)
    g = randn(B, T, HV) if gate else F.logsigmoid(randn(B, T, HV) + 2.0) * 0.5
    beta = randn(B, T, HV) if logits else torch.rand(B, T, HV, generator=gen, device="cuda") * 0.8 + 0.1
    h0 = randn(n, HV, D, D) * 0.1 if init else None
    a_log = torch.rand(HV, generator=gen, device="cuda") * 1.5 - 2.0 if gate else None
    dt_bias = 0.5 * randn(HV) if gate else None
    return [x.to(dtype) for x in (q, k, v, g, beta)], h0, a_log, dt_bias


OP_FLAGS = ("scale", "use_qk_l2norm_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval",
            "state_v_first", "use_gate_in_kernel")


def reference(q, k, v, g, beta, h0, a_log, dt_bias, cu, spec):
    """(o, final_state) of the float64 reference op on the same arguments."""
    op = GDNFwdOp(**{name: spec.flag(name) for name in OP_FLAGS if spec.flag(name) is not None}, target="reference")
    return op(*in_float64((q, k, v, g, beta, h0, cu, None, a_log, dt_bias)))


def rel(out, ref):
    assert torch.isfinite(out).all()
    return relative_error(out, ref)


CASES = [
    dict(dtype=torch.bfloat16, heads=4, value_heads=8, dim=128, lengths=(200, 263)),
    dict(dtype=torch.float16, heads=2, value_heads=4, dim=64, lengths=(130, 64), use_qk_l2norm_in_kernel=True,
         use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True),
    dict(dtype=torch.bfloat16, heads=2, value_heads=4, dim=64, lengths=(97,), state_v_first=True,
         use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True),
]


# The call's default, and each layout forced: every feature case runs on each. The fused kernel's
# walk variants: "fused-matrix" moves Vᵀ and Oᵀ by transposing matrix loads and stores,
# "fused-paired" waits for its independent products in pairs, "fused-ahead" does both with three
# input stages, its first pass up to two chunks ahead; "value-paired" is the two-pass value-major chain
# with paired waits.
FUSED_LAYOUTS = {"fused": {}, "fused-matrix": dict(walk_moves="matrix"), "fused-paired": dict(walk_issue="paired"),
                 "fused-ahead": dict(walk_moves="matrix", walk_issue="paired", stages=3)}
LAYOUTS = ("default", "key", "value", "value-paired", *FUSED_LAYOUTS)


def layout_config(layout: str, spec: CallSpec) -> GDNPrefillConfig:
    """The config a test runs ``spec`` with in ``layout``."""
    if layout in FUSED_LAYOUTS:
        return fused_config(spec.dim_v, **FUSED_LAYOUTS[layout])
    value = dict(state_major="value", block_v=64, threads=128, num_stages=2)
    forced = {"key": dict(block_v=32, threads=256, num_stages=1), "value": value,
              "value-paired": dict(value, walk_issue="paired")}.get(layout)
    return default(spec) if forced is None else GDNPrefillConfig(**forced)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("init", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_equal_lengths_two_lengths_one_build(case, init, layout):
    from tileops.kernels.gdn.prefill_launch import PrefillLauncher

    case = dict(case)
    dtype, H, HV, D, lengths = (case.pop(n) for n in ("dtype", "heads", "value_heads", "dim", "lengths"))
    B = 3
    spec = call_spec(mode="prefill", dtype=dtype, heads=H, value_heads=HV, dim=D, batch=B, tokens=lengths[0], **case)
    assert refuse(spec) is None
    launch = PrefillLauncher(layout_config(layout, spec), spec)
    gen = torch.Generator(device="cuda").manual_seed(len(lengths) + init)
    for T in lengths:  # a new length runs on the same compiled kernels
        toks, h0, a_log, dt_bias = inputs(gen, B, T, H, HV, D, dtype, n=B, init=init,
                                          logits=spec.flag("use_beta_sigmoid_in_kernel"),
                                          gate=spec.flag("use_gate_in_kernel"))
        o, ht = launch(*toks, h0, None, None, a_log, dt_bias)
        ro, rh = reference(*toks, h0, a_log, dt_bias, None, spec)
        assert o.dtype == dtype and o.shape == (B, T, HV, D)
        assert rel(o, ro) < TOL and rel(ht, rh) < TOL


@pytest.mark.parametrize("lengths", [
    tuple(int(x) for x in torch.randint(0, 70, (1000,), generator=torch.Generator().manual_seed(0))),
    (1500,),
    (5, 64, 0, 129, 1, 700),
])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_packed_varlen(lengths, layout):
    from tileops.kernels.gdn.prefill_launch import PrefillLauncher

    H, HV, D, dtype = 2, 4, 64, torch.bfloat16
    n, T = len(lengths), sum(lengths)
    spec = call_spec(mode="varlen", dtype=dtype, heads=H, value_heads=HV, dim=D, batch=n, tokens=T,
                     use_qk_l2norm_in_kernel=True)
    launch = PrefillLauncher(layout_config(layout, spec), spec)
    gen = torch.Generator(device="cuda").manual_seed(n)
    toks, h0, _, _ = inputs(gen, 1, T, H, HV, D, dtype, n=n, init=True, logits=False, gate=False)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    o, ht = launch(*toks, h0, cu, cu.cpu(), None, None)
    ro, rh = reference(*toks, h0, None, None, cu, spec)
    assert rel(o, ro) < TOL and rel(ht, rh) < TOL

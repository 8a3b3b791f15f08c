"""tl.gla_chunk_fwd on an sm90 GPU against the float64 reference: GLAChunkFwdOp's (o, final_state)
and its per-chunk states h, with and without an initial state, K = V ∈ {64, 128}, fp16 and bf16,
a given scale, gates from weak to −16 a token; and GLAChunkBwdOp's gradients from our h equal to
those from the reference's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tileops import dispatch
from tileops.linear_attention import GLAChunkBwdOp, GLAChunkFwdOp
from tileops.tuner.gate import in_float64, relative_error

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                       reason="needs an sm90 (Hopper) GPU"),
]

TOL = {torch.bfloat16: 2e-2, torch.float16: 3e-3}  # as GLA's prefill: the same two passes


def inputs(seed, B, T, H, D, dtype, *, init=True, strength=1.0, gate_dtype=None):
    """q, k, v in ``dtype``; g in ``gate_dtype`` (default: ``dtype``, as the specification has it)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda")
    q, k, v = F.normalize(randn(B, T, H, D), dim=-1), F.normalize(randn(B, T, H, D), dim=-1), randn(B, T, H, D)
    g = -strength * torch.rand(B, T, H, D, generator=gen, device="cuda")
    h0 = randn(B, H, D, D) * 0.1 if init else None
    return (q.to(dtype), k.to(dtype), v.to(dtype), g.to(gate_dtype or dtype), h0)


CASES = [
    dict(id="bf16-k128-initial-state", dtype=torch.bfloat16, B=2, T=320, H=4, D=128),
    dict(id="fp16-k64-zeros-scale", dtype=torch.float16, B=3, T=256, H=2, D=64, init=False, scale=0.3),
    dict(id="bf16-k64-strongest-gates", dtype=torch.bfloat16, B=1, T=512, H=2, D=64, strength=5.0),
    dict(id="fp16-k128-weak-gates", dtype=torch.float16, B=2, T=192, H=2, D=128, strength=2e-3),
    dict(id="bf16-k128-steep-gates", dtype=torch.bfloat16, B=2, T=256, H=2, D=128, strength=16.0),
    dict(id="bf16-k128-fp32-gate", dtype=torch.bfloat16, B=2, T=192, H=2, D=128, gate_dtype=torch.float32),
]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_outputs_and_chunk_states_against_float64(case):
    case = dict(case)
    case.pop("id")
    dtype, scale = case["dtype"], case.pop("scale", -1.0)
    args = inputs(0, case.pop("B"), case.pop("T"), case.pop("H"), case.pop("D"), case.pop("dtype"), **case)
    op = GLAChunkFwdOp(scale=scale)
    spec, _ = op.describe(*args)
    assert dispatch.explain_spec("GLAChunkFwdOp", None, spec).kernel == "tl.gla_chunk_fwd"
    ours = op(*args)
    ref = GLAChunkFwdOp(scale=scale, target="reference")(*in_float64(args))
    errors = [relative_error(x, y) for x, y in zip((*ours, ours.h), (*ref, ref.h))]
    print(f"gla chunk fwd {dtype}: o {errors[0]:.2e}, final state {errors[1]:.2e}, h {errors[2]:.2e}")
    assert ours.h.dtype == torch.float32 and ours.h.is_contiguous()
    assert max(errors) <= TOL[dtype], errors


def test_the_backward_takes_our_chunk_states_as_the_references():
    # GLAChunkBwdOp reads every chunk's state from h: the gradients from our forward's h equal
    # those from the reference forward's.
    q, k, v, g, h0 = inputs(1, 2, 256, 2, 64, torch.bfloat16)
    ours = GLAChunkFwdOp()(q, k, v, g, h0)
    ref = GLAChunkFwdOp(target="reference")(q, k, v, g, h0)
    do = torch.randn_like(v)
    backward = GLAChunkBwdOp(has_initial_state=True)
    grads = backward(q, k, v, g, ours.h, do, None)
    expected = backward(q, k, v, g, ref.h.float(), do, None)
    errors = [relative_error(x, y) for x, y in zip(grads, expected)]
    print(f"gla chunk bwd from our h: dq, dk, dv, dg {', '.join(f'{e:.2e}' for e in errors)}")
    assert max(errors) <= TOL[torch.bfloat16], errors

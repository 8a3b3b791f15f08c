"""tl.gla_chunk_bwd on an sm90 GPU against the float64 reference: GLAChunkBwdOp's (dq, dk, dv, dg)
from the float64 forward's h, with and without an initial state and a final-state gradient,
K = V ∈ {64, 128}, fp16 and bf16, a given scale, gates from weak to −16 a token, one chunk and
many; and inside a CUDA graph. dg takes dq's tolerance: its cancelling terms take the same rounded
state gradient (``test_gla_chunk_bwd_model``)."""

from __future__ import annotations

import pytest
import torch

from tileops import dispatch
from tileops.linear_attention import GLAChunkBwdOp, GLAChunkFwdOp
from tileops.tuner.gate import in_float64, relative_error
from tests.kernels.gla.test_gla_chunk_fwd_gpu import TOL, inputs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                       reason="needs an sm90 (Hopper) GPU"),
]

CASES = [
    dict(id="bf16-k128-state-dht", dtype=torch.bfloat16, B=2, T=320, H=4, D=128, dht=True),
    dict(id="fp16-k64-neither-scale", dtype=torch.float16, B=3, T=256, H=2, D=64, init=False, scale=0.3),
    dict(id="bf16-k64-strongest-gates-dht", dtype=torch.bfloat16, B=1, T=512, H=2, D=64, strength=5.0, dht=True),
    dict(id="fp16-k128-weak-gates-state", dtype=torch.float16, B=2, T=192, H=2, D=128, strength=2e-3),
    dict(id="bf16-k128-steep-gates-dht", dtype=torch.bfloat16, B=2, T=256, H=2, D=128, strength=16.0, dht=True),
    dict(id="bf16-k128-one-chunk-dht", dtype=torch.bfloat16, B=4, T=64, H=2, D=128, init=False, dht=True),
]


def call(case: dict, seed: int = 0):
    """The case's forward inputs, the float64 forward's h, do and dht, and the backward op."""
    case = dict(case)
    case.pop("id")
    scale, with_dht = case.pop("scale", -1.0), case.pop("dht", False)
    B, T, H, D, dtype = (case.pop(name) for name in ("B", "T", "H", "D", "dtype"))
    q, k, v, g, h0 = inputs(seed, B, T, H, D, dtype, **case)
    ref = GLAChunkFwdOp(scale=scale, target="reference")(*in_float64((q, k, v, g, h0)))
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    do = torch.randn(B, T, H, D, generator=gen, device="cuda").to(dtype)
    dht = torch.randn(B, H, D, D, generator=gen, device="cuda") if with_dht else None
    op = GLAChunkBwdOp(scale=scale, has_initial_state=h0 is not None)
    return op, (q, k, v, g, ref.h.float(), do, dht), GLAChunkBwdOp(scale=scale, has_initial_state=h0 is not None,
                                                                   target="reference")


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_gradients_against_float64(case):
    op, args, reference = call(case)
    spec, _ = op.describe(*args)
    assert dispatch.explain_spec("GLAChunkBwdOp", None, spec).kernel == "tl.gla_chunk_bwd"
    ours = op(*args)
    expected = reference(*in_float64(args))
    errors = [relative_error(x, y) for x, y in zip(ours, expected)]
    print(f"gla chunk bwd {case['id']}: dq, dk, dv, dg {', '.join(f'{e:.2e}' for e in errors)}")
    assert [x.dtype for x in ours] == [x.dtype for x in args[:3]] + [args[3].dtype]
    assert max(errors) <= TOL[case["dtype"]], errors


def test_a_cuda_graph_replays_the_backward_on_new_inputs():
    case = dict(CASES[0])
    op, args, _ = call(case)
    op(*args)  # compile outside the capture
    static = [None if x is None else x.clone() for x in args]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = op(*static)
    op2, fresh, _ = call(case, seed=7)
    for s, x in zip(static, fresh):
        if s is not None:
            s.copy_(x)
    graph.replay()
    direct = op2(*fresh)
    for x, y in zip(out, direct):
        assert torch.equal(x, y)


def test_autograd_through_the_chunked_forward_runs_the_backward_kernel():
    """Training through GLAChunkFwdOp's o and final state: its gradient comes from tl.gla_chunk_bwd
    with no fallback warning, and equals the float64 reference's."""
    import warnings

    from tileops.errors import ReferenceFallbackWarning

    q, k, v, g, _ = inputs(3, 2, 256, 2, 128, torch.bfloat16, init=False)
    gen = torch.Generator(device="cuda").manual_seed(4)
    do = torch.randn(v.shape, generator=gen, device="cuda").bfloat16()
    dht = torch.randn(2, 2, 128, 128, generator=gen, device="cuda")

    def grads(args, target=None):
        leaves = [x.detach().clone().requires_grad_() for x in args]
        o, final = GLAChunkFwdOp(target=target)(*leaves)
        ((o * do.to(o.dtype)).sum() + (final * dht.to(final.dtype)).sum()).backward()
        return [x.grad for x in leaves]

    with warnings.catch_warnings():
        warnings.simplefilter("error", ReferenceFallbackWarning)
        ours = grads((q, k, v, g))
    expected = grads(in_float64((q, k, v, g)), target="reference")
    errors = [relative_error(x, y) for x, y in zip(ours, expected)]
    print(f"gla chunk fwd autograd: dq, dk, dv, dg {', '.join(f'{e:.2e}' for e in errors)}")
    assert max(errors) <= TOL[torch.bfloat16], errors

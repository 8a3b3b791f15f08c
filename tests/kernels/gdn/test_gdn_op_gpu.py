"""GDNFwdOp on a CUDA device through dispatch: the in-tree kernels serve the call (decode and
prefill), agree with the float64 reference, and a decode call captured in a CUDA graph replays
correctly with no database access and no compile."""

from __future__ import annotations

import pytest
import torch

from tileops import dispatch
from tileops.dispatch.userdb import UserDatabase
from tileops.linear_attention import BUILTIN, GDNFwdOp
from tileops.cases import Case
from tileops.tuner.cases import make_inputs, make_op
from tileops.tuner.gate import relative_error

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

CASES = [
    Case("gdn", 4, 1, 2, 4, 128, device="cuda"),
    Case("gdn", 2, 1, 2, 2, 64, "float16", device="cuda"),
    Case("gdn", 2, 300, 2, 4, 128, device="cuda"),
    Case("gdn", 1, 700, 2, 4, 64, "float16", device="cuda"),
    Case("gdn", 1, 0, 2, 4, 128, device="cuda", seqlens=(1, 64, 200, 3, 130)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label)
def test_builtin_kernel_serves_and_matches_reference(case):
    if case.seqlens:
        case = Case(**{**case.__dict__, "tokens": sum(case.seqlens)})
    seed = torch.randint(0, 1 << 30, ()).item()
    op, args = make_op(case, target=BUILTIN), make_inputs(case, seed)
    explanation = dispatch.explain(op, *args)
    assert explanation.kernel in ("tl.gdn_decode", "tl.gdn_prefill")
    o, state = op(*args)
    ref_o, ref_state = make_op(case, target="reference")(*make_inputs(case, seed, torch.float64))
    assert relative_error(o, ref_o) < 2e-2, seed
    assert relative_error(state, ref_state) < 2e-2, seed
    assert state.dtype == torch.float32 and o.dtype == args[0].dtype


def test_decode_replays_in_a_cuda_graph_without_database_or_compile(monkeypatch):
    case = Case("gdn", 8, 1, 2, 4, 128, device="cuda")
    op = make_op(case)
    static = make_inputs(case, seed=1)
    op(*static)  # warm: selection cached, kernel built
    torch.cuda.synchronize()
    monkeypatch.setattr(UserDatabase, "nearest", lambda self, key: pytest.fail("database read during replay"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_o, out_state = op(*static)
    for seed in (2, 3):
        fresh = make_inputs(case, seed)
        for buffer, value in zip(static, fresh):
            if isinstance(buffer, torch.Tensor):
                buffer.copy_(value)
        graph.replay()
        torch.cuda.synchronize()
        eager_o, eager_state = op(*fresh)
        assert torch.equal(out_o, eager_o) and torch.equal(out_state, eager_state)


def test_an_unbuilt_shape_refuses_to_compile_during_capture():
    from tileops.dispatch.compile_cache import CompileDuringCapture

    case = Case("gdn", 3, 1, 3, 6, 64, device="cuda")
    op = GDNFwdOp(use_qk_l2norm_in_kernel=True, allow_neg_eigval=True, use_beta_sigmoid_in_kernel=True)
    args = make_inputs(case, seed=4)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(CompileDuringCapture, match="before capturing"):
        with torch.cuda.graph(graph):
            op(*args)


@pytest.mark.parametrize("case", [Case("gdn", 8, 1, 2, 4, 128, device="cuda"), Case("gdn", 2, 300, 2, 4, 128, device="cuda"),
                                  Case("gdn", 1, 397, 2, 4, 64, device="cuda", seqlens=(1, 64, 200, 3, 129))],
                         ids=lambda c: c.label)
def test_warm_eager_call_never_synchronises_with_the_host(case):
    op, args = make_op(case), make_inputs(case, seed=5)
    op(*args)  # warm: selection cached, kernels built
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        op(*args)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def test_prefill_replays_in_a_cuda_graph():
    case = Case("gdn", 1, 397, 2, 4, 128, device="cuda", seqlens=(1, 64, 200, 3, 129))
    op = make_op(case)
    static = make_inputs(case, seed=6)
    op(*static)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_o, out_state = op(*static)
    fresh = make_inputs(case, seed=7)
    for buffer, value in zip(static, fresh):
        if isinstance(buffer, torch.Tensor) and buffer.is_cuda:
            buffer.copy_(value)
    graph.replay()
    torch.cuda.synchronize()
    eager_o, eager_state = op(*fresh)
    assert torch.equal(out_o, eager_o) and torch.equal(out_state, eager_state)

"""The ops under the compiler on the CPU: zero graph breaks with torch.compile(fullgraph=True) (cold,
new lengths, dynamic=True, packed varlen given cu_seqlens_cpu), compiled training, torch.export with
a dynamic length, fx symbolic tracing, and torch.library.opcheck of each custom op."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tileops.linear_attention as la
from tests.support.op_inputs import cu_seqlens_of, gen, single_thread, valid_call

H, K, V = 1, 4, 4


class Model(torch.nn.Module):
    """Calls every inference op and two chunk ops on the same tokens, as a model layer would."""

    def __init__(self) -> None:
        super().__init__()
        self.gdn, self.kda = la.GDNFwdOp(use_qk_l2norm_in_kernel=True), la.KDAFwdOp()
        self.deltanet, self.gla, self.gla_chunk = la.DeltaNetFwdOp(), la.GLAFwdOp(), la.GLAChunkFwdOp(chunk_size=4)
        self.deltanet_chunk = la.DeltaNetChunkFwdOp(chunk_size=4)  # trained through o: its backward op

    def forward(self, q, k, v, g, beta, cu_seqlens=None, cu_seqlens_cpu=None):
        gk = g.unsqueeze(-1).expand(-1, -1, -1, K)
        gdn = self.gdn(q, k, v, g, beta, None, cu_seqlens, cu_seqlens_cpu)
        kda = self.kda(q, k, v, gk, beta, None, cu_seqlens, cu_seqlens_cpu)
        delta = self.deltanet(q, k, v, beta, None, cu_seqlens, cu_seqlens_cpu)
        gla = self.gla(q, k, v, gk, None, cu_seqlens, cu_seqlens_cpu)
        o = gdn[0] + kda[0] + delta[0] + gla[0]
        if cu_seqlens is None:
            o = o + self.gla_chunk(q, k, v, gk)[0]
            bhsd = (x.transpose(1, 2) for x in (q, k, v, beta))
            o = o + self.deltanet_chunk(*bhsd)[0].transpose(1, 2)
        return o, gdn[1] + kda[1] + delta[1] + gla[1]


def tokens(T: int, seed: int = 0, B: int = 1) -> tuple[torch.Tensor, ...]:
    _, fwd = valid_call("GDNFwdOp", gen(seed), B=B, T=T, H=H, K=K, V=V)
    return fwd["q"].float(), fwd["k"].float(), fwd["v"].float(), fwd["g"].float(), fwd["beta"].float()


def breaks(model, *args) -> int:
    torch._dynamo.reset()
    return torch._dynamo.explain(model)(*args).graph_break_count


COLD = """
import torch
from tests.ops.test_compile import Model, tokens
explanation = torch._dynamo.explain(Model())(*tokens(6))
print(explanation.graph_break_count, explanation.graph_count)
"""


def test_cold_call_compiles_without_graph_breaks():
    """In a fresh process, before any eager call has loaded the kernel registry."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", COLD], cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["0", "1"]


def test_new_lengths_and_packed_varlen_have_no_graph_breaks():
    model = Model()
    assert breaks(model, *tokens(5)) == 0
    assert breaks(model, *tokens(11, seed=1)) == 0
    cu = cu_seqlens_of([3, 5])
    assert breaks(model, *tokens(8, seed=2), cu, cu) == 0


def test_fullgraph_dynamic_compile_matches_eager_for_new_lengths_and_varlen():
    model = Model()
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend="aot_eager")
    cu = cu_seqlens_of([2, 5])
    with single_thread():
        for args in (tokens(5), tokens(9, seed=1, B=2), (*tokens(7, seed=2), cu, cu)):
            for got, want in zip(compiled(*args), model(*args)):
                torch.testing.assert_close(got, want)


def test_inductor_fullgraph_compile_matches_eager():
    model = Model()
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    with single_thread():
        for T in (6, 10):
            args = tokens(T, seed=T)
            for got, want in zip(compiled(*args), model(*args)):
                torch.testing.assert_close(got, want)


def test_compiled_training_step_gives_the_eager_gradients():
    model = Model()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    args = tokens(5, seed=3)
    grads = []
    with single_thread():
        for fn in (compiled, model):
            leaves = [x.clone().requires_grad_() for x in args]
            o, state = fn(*leaves)
            (o.square().sum() + state.sum()).backward()
            grads.append([x.grad for x in leaves])
    for got, want in zip(*grads):
        assert got is not None
        torch.testing.assert_close(got, want)


def test_export_with_a_dynamic_length():
    model = Model()
    length = torch.export.Dim("T", min=2, max=4096)
    exported = torch.export.export(model, tokens(6), dynamic_shapes=({1: length},) * 5)
    names = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert {"tileops.GDNFwdOp.default", "tileops.GLAChunkFwdOp.default"} <= names
    with single_thread():
        args = tokens(13, seed=4)
        for got, want in zip(exported.module()(*args), model(*args)):
            torch.testing.assert_close(got, want)


def test_fx_symbolic_trace_records_the_custom_ops():
    traced = torch.fx.symbolic_trace(Model(), concrete_args={"cu_seqlens": None, "cu_seqlens_cpu": None})
    assert sum("tileops.GDNFwdOp" in str(n.target) for n in traced.graph.nodes) == 1
    args = tokens(5, seed=5)
    for got, want in zip(traced(*args), Model()(*args)):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", ["DeltaNetChunkFwdOp", "DeltaNetChunkBwdOp", "DeltaNetRecurrentFwdOp", "DeltaNetFwdOp",
                                  "GDNFwdOp", "KDAFwdOp", "GLAChunkFwdOp", "GLAChunkBwdOp", "GLARecurrentFwdOp",
                                  "GLAFwdOp"])
def test_opcheck(name):
    """Schema, fake implementation, autograd registration (no mutation, no aliasing) of each op."""
    init, fwd = valid_call(name, gen(21), B=1, T=3, H=1, K=2, V=2, chunk_size=2)
    op = getattr(la, name)(**init)
    from tileops import library

    params = [p for p in inspect.signature(type(op).forward).parameters.values() if p.name != "self"]
    args = tuple(fwd.get(p.name) for p in params) + library.settings_of(op)
    custom_op = getattr(torch.ops.tileops, name).default
    with single_thread():
        real = custom_op(*args)
        with torch._subclasses.FakeTensorMode() as mode:
            fake = custom_op(*(mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in args))
        assert [(x.shape, x.dtype, x.stride()) for x in fake] == [(x.shape, x.dtype, x.stride()) for x in real]
        # The backward ops differentiate the reference inside (torch.func), which opcheck's
        # dispatch modes cannot watch: the fake comparison above stands for its schema and fake checks.
        checks = ("test_autograd_registration",) + (() if "Bwd" in name else ("test_schema", "test_faketensor"))
        torch.library.opcheck(custom_op, args, test_utils=checks)

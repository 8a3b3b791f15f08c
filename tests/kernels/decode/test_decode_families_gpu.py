"""DeltaNet's, GLA's and KDA's decode kernels on a CUDA device, through their ops, against the float64
reference: both widths, every token dtype an op takes, grouped value heads, both state layouts and
every input transform KDA takes, states stored in the token dtype for the step ops, with and
without an initial state, resets (a log decay of -inf) and gates from a huge A_log; plus a new
batch size that never compiles and CUDA-graph replay."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import pytest
import torch
import torch.nn.functional as F

import tileops.linear_attention as la
from tileops.kernels.registry import get_kernel
from tileops.targets import BUILTIN
from tileops.tuner.gate import in_float64, relative_error

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

F64 = torch.float64
HEADS = 4
TOLERANCE = {torch.bfloat16: 8e-3, torch.float16: 1e-3, torch.float32: 2e-5}  # o is rounded to its dtype
KERNEL_OF = {"DeltaNetFwdOp": "tl.deltanet_decode", "DeltaNetRecurrentFwdOp": "tl.deltanet_decode",
             "GLAFwdOp": "tl.gla_decode", "GLARecurrentFwdOp": "tl.gla_decode", "KDAFwdOp": "tl.kda_decode"}


@dataclass(frozen=True)
class Case:
    """One op, its constructor flags and the shape of its call."""

    op: str
    dim: int = 128
    dtype: torch.dtype = torch.bfloat16
    group: int = 1  # HV // H, for the ops that take grouped value heads
    state_dtype: torch.dtype = torch.float32  # the step ops may keep it in the token dtype
    has_state: bool = True
    resets: bool = False  # some log decays are -inf
    flags: tuple = field(default=())

    @property
    def name(self) -> str:
        parts = [self.op, f"K{self.dim}", str(self.dtype)[6:], f"g{self.group}", f"s-{str(self.state_dtype)[6:]}"]
        parts += [n for n, on in (("nostate", not self.has_state), ("resets", self.resets)) if on]
        return "-".join(parts + [f"{k}={v}" for k, v in self.flags])

    @property
    def step(self) -> bool:
        return self.op.endswith("RecurrentFwdOp")


def make_op(case: Case, target):
    return getattr(la, case.op)(**dict(case.flags), target=target)


def make_args(case: Case, batch: int, seed: int) -> tuple:
    """Fresh random forward arguments on the GPU (never zeros), in the op's order."""
    gen = torch.Generator().manual_seed(seed)
    H, D = HEADS, case.dim
    HV = H * case.group

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=F64)

    flags = dict(case.flags)
    tokens = () if case.step else (1,)
    q, k, v = randn(batch, *tokens, H, D), randn(batch, *tokens, H, D), randn(batch, *tokens, HV, D)
    if not flags.get("use_qk_l2norm_in_kernel"):
        k = k / k.norm(dim=-1, keepdim=True)  # keeps I - beta k k^T contractive
    state = 0.5 * randn(batch, HV, D, D) if case.has_state else None
    args = [q.to(case.dtype), k.to(case.dtype), v.to(case.dtype)]
    params = torch.float32
    if case.op in ("GLAFwdOp", "GLARecurrentFwdOp", "KDAFwdOp"):
        g = randn(batch, *tokens, HV, D) if flags.get("use_gate_in_kernel") else F.logsigmoid(randn(batch, *tokens, HV, D))
        if case.resets:
            g[0, ..., 0, :] = -torch.inf
            g[-1, ..., -1, : D // 2] = torch.inf if flags.get("use_gate_in_kernel") else -torch.inf
        args.append(g.to(params))
    if case.op != "GLAFwdOp" and case.op != "GLARecurrentFwdOp":
        beta = randn(batch, *tokens, HV) if flags.get("use_beta_sigmoid_in_kernel") else torch.rand(
            batch, *tokens, HV, generator=gen, dtype=F64) * 0.9 + 0.05
        args.append(beta.to(params))
    if case.step:
        args.append(state.to(case.state_dtype))
    else:
        args += [None if state is None else state.float(), None, None]
        if case.op == "KDAFwdOp":
            gate = flags.get("use_gate_in_kernel")
            args += [torch.tensor([0.3, 95.0, -2.0, 1.0] * case.group, dtype=params) if gate else None,
                     (0.5 * randn(HV * D)).to(params) if gate else None]
    return tuple(None if a is None else a.cuda() for a in args)


def errors(case: Case, outputs: tuple, args: tuple) -> tuple[float, float]:
    o_ref, state_ref = make_op(case, "reference")(*in_float64(args))
    o, state = outputs
    assert o.shape == o_ref.shape and o.dtype == case.dtype
    assert state.shape == state_ref.shape and state.dtype == case.state_dtype
    assert torch.isfinite(o).all() and torch.isfinite(state).all()
    return relative_error(o, o_ref), relative_error(state, state_ref)


def assert_close(case: Case, errs: tuple[float, float]) -> None:
    state_tol = TOLERANCE[case.state_dtype] if case.state_dtype != torch.float32 else 2e-5
    print(f"relative error: decode {case.name}: o {errs[0]:.2e}, state {errs[1]:.2e}")  # shown by pytest -s
    assert errs[0] < TOLERANCE[case.dtype], f"{case.name}: o rel. error {errs[0]:.2e}"
    assert errs[1] < state_tol, f"{case.name}: state rel. error {errs[1]:.2e}"


KDA_ALL = (("use_qk_l2norm_in_kernel", True), ("use_beta_sigmoid_in_kernel", True), ("allow_neg_eigval", True),
           ("use_gate_in_kernel", True))
CASES = [
    Case("DeltaNetFwdOp"), Case("DeltaNetFwdOp", dim=64, dtype=torch.float16, group=2),
    Case("DeltaNetFwdOp", flags=(("use_qk_l2norm_in_kernel", True), ("scale", 0.2)), has_state=False),
    Case("DeltaNetRecurrentFwdOp", dtype=torch.float32), Case("DeltaNetRecurrentFwdOp", dim=64),
    Case("DeltaNetRecurrentFwdOp", dtype=torch.float16, state_dtype=torch.float16),
    Case("DeltaNetRecurrentFwdOp", dim=64, state_dtype=torch.bfloat16),
    Case("GLAFwdOp"), Case("GLAFwdOp", dim=64, dtype=torch.float16, has_state=False, flags=(("scale", 0.3),)),
    Case("GLAFwdOp", resets=True),
    Case("GLARecurrentFwdOp", dtype=torch.float32), Case("GLARecurrentFwdOp", dim=64, dtype=torch.float16,
                                                          state_dtype=torch.float16),
    Case("GLARecurrentFwdOp", state_dtype=torch.bfloat16, resets=True),
    Case("KDAFwdOp"), Case("KDAFwdOp", dim=64, dtype=torch.float16, group=2),
    Case("KDAFwdOp", flags=(("state_v_first", True),)), Case("KDAFwdOp", dim=64, flags=(("state_v_first", True),),
                                                             has_state=False),
    Case("KDAFwdOp", flags=KDA_ALL, group=2), Case("KDAFwdOp", flags=KDA_ALL + (("lower_bound", -5.0),), resets=True),
    Case("KDAFwdOp", dim=64, dtype=torch.float16, flags=(("use_gate_in_kernel", True), ("state_v_first", True)),
         resets=True),
    Case("KDAFwdOp", resets=True, flags=(("use_qk_l2norm_in_kernel", True),)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_matches_reference(case):
    args = make_args(case, batch=5, seed=zlib.crc32(case.name.encode()))
    op = make_op(case, BUILTIN)
    assert_close(case, errors(case, op(*args), args))


def launcher(case: Case, args: tuple):
    spec, _ = make_op(case, BUILTIN).describe(*args)
    kernel = get_kernel(KERNEL_OF[case.op])
    return kernel.build(kernel.default(spec), spec)


@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[7], CASES[17]], ids=lambda c: c.name)
def test_new_batch_size_never_compiles(case, monkeypatch):
    import tilelang

    launch = launcher(case, make_args(case, 2, seed=1))
    monkeypatch.setattr(tilelang, "compile", lambda *a, **k: pytest.fail("a new batch size must not compile"))
    for batch in (1, 7, 33, 130):
        args = make_args(case, batch, seed=batch)
        assert_close(case, errors(case, launch(*args), args))


@pytest.mark.parametrize("case", [CASES[0], CASES[10], CASES[18]], ids=lambda c: c.name)
def test_cuda_graph_replay(case):
    op = make_op(case, BUILTIN)
    static = list(make_args(case, 4, seed=3))
    op(*static)  # warm: every program exists before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = op(*static)
    for seed in (4, 5):
        fresh = make_args(case, 4, seed=seed)
        for held, new in zip(static, fresh):
            if held is not None:
                held.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        assert_close(case, errors(case, outputs, fresh))

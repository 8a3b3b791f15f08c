"""tl.gdn_decode on a CUDA device against the float64 reference.

Covers both state widths, HV = H and 2H, fp16 and bf16, both state layouts, every input transform,
with and without an initial state, and several configs; plus what a caller relies on: a new batch
size never compiles, the initial state is left alone, strided inputs work, CUDA-graph capture works.
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass, replace
from typing import Optional

import pytest
import torch

from tileops.callspec import CallSpec, make_flags
from tileops.linear_attention import GDNFwdOp
from tileops.tuner.gate import in_float64, relative_error

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

F64 = torch.float64
HEADS = 4


@dataclass(frozen=True)
class Case:
    """One call shape and flag set."""

    dim: int = 128
    group: int = 1  # HV // H
    dtype: torch.dtype = torch.bfloat16
    v_first: bool = False
    l2norm: bool = False
    sigmoid: bool = False
    neg_eigval: bool = False
    gate: bool = False
    has_state: bool = True
    fp32_params: bool = True  # g, beta, A_log, dt_bias in fp32 (else in the token dtype)

    def op_flags(self) -> dict:
        """GDNFwdOp's constructor arguments for this case."""
        return dict(scale=self.dim ** -0.5, use_qk_l2norm_in_kernel=self.l2norm,
                    use_beta_sigmoid_in_kernel=self.sigmoid, allow_neg_eigval=self.neg_eigval,
                    state_v_first=self.v_first, use_gate_in_kernel=self.gate)

    @property
    def name(self) -> str:
        parts = [f"K{self.dim}", f"HV{self.group}H", str(self.dtype).removeprefix("torch."),
                 "vk" if self.v_first else "kv"]
        parts += [flag for flag, on in (("l2", self.l2norm), ("sig", self.sigmoid), ("neg", self.neg_eigval),
                                        ("gate", self.gate), ("nostate", not self.has_state),
                                        ("halfparams", not self.fp32_params)) if on]
        return "-".join(parts)


CASES = [
    Case(),
    Case(dim=64),
    Case(dtype=torch.float16, group=2),
    Case(dim=64, dtype=torch.float16, v_first=True),
    Case(v_first=True, group=2),
    Case(l2norm=True),
    Case(dim=64, l2norm=True, v_first=True, group=2),
    Case(sigmoid=True, dtype=torch.float16),
    Case(sigmoid=True, neg_eigval=True, v_first=True),
    Case(gate=True),
    Case(dim=64, gate=True, v_first=True, dtype=torch.float16),
    Case(l2norm=True, sigmoid=True, gate=True, group=2),
    Case(l2norm=True, sigmoid=True, neg_eigval=True, gate=True, v_first=True, group=2, fp32_params=False),
    Case(has_state=False),
    Case(dim=64, has_state=False, v_first=True, l2norm=True, fp32_params=False),
    Case(fp32_params=False, dtype=torch.float16, gate=True, sigmoid=True),
]

# (block_v, threads) of the space, checked at K = 128 in both layouts
CONFIGS = [(32, 64), (32, 128), (64, 128)]

TOLERANCE = {torch.bfloat16: 8e-3, torch.float16: 1e-3}  # o is rounded to the token dtype
STATE_TOLERANCE = 2e-5  # fp32 arithmetic


def make_spec(case: Case, batch: int) -> CallSpec:
    """The CallSpec the op layer would describe for ``case``."""
    from tileops.device import device_facts

    device = torch.device("cuda", torch.cuda.current_device())
    arch, name = device_facts(device)
    return CallSpec(
        op="gdn", entry="GDNFwdOp", mode="decode", dtype=case.dtype, device=device, arch=arch,
        device_name=name, batch=batch, tokens=1, heads=HEADS, value_heads=HEADS * case.group,
        dim_k=case.dim, dim_v=case.dim,
        flags=make_flags(**case.op_flags(), has_initial_state=case.has_state))


def make_inputs(case: Case, batch: int, seed: int) -> dict:
    """Fresh random forward arguments on the GPU (never zeros)."""
    gen = torch.Generator().manual_seed(seed)
    H, HV, D = HEADS, HEADS * case.group, case.dim

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=F64)

    def uniform(lo, hi, *shape):
        return lo + (hi - lo) * torch.rand(*shape, generator=gen, dtype=F64)

    k = randn(batch, 1, H, D)
    if not case.l2norm:
        k = k / k.norm(dim=-1, keepdim=True)  # keeps the transition I - beta k k^T contractive
    params = torch.float32 if case.fp32_params else case.dtype
    args = {
        "q": randn(batch, 1, H, D).to(case.dtype),
        "k": k.to(case.dtype),
        "v": randn(batch, 1, HV, D).to(case.dtype),
        "g": (randn(batch, 1, HV) if case.gate else uniform(-0.5, -0.01, batch, 1, HV)).to(params),
        "beta": (randn(batch, 1, HV) if case.sigmoid else uniform(0.05, 1.0, batch, 1, HV)).to(params),
        "initial_state": randn(batch, HV, D, D).float() if case.has_state else None,
        "A_log": uniform(0.0, 2.5, HV).to(params) if case.gate else None,
        "dt_bias": (0.5 * randn(HV)).to(params) if case.gate else None,
    }
    return {name: None if x is None else x.cuda() for name, x in args.items()}


def reference(case: Case, args: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, final_state) of the float64 reference op on the same arguments, in the call's state layout."""
    op = GDNFwdOp(**case.op_flags(), target="reference")
    return op(*in_float64((args["q"], args["k"], args["v"], args["g"], args["beta"], args["initial_state"],
                           None, None, args["A_log"], args["dt_bias"])))


def poison_allocator(device: torch.device) -> None:
    """Leave NaN in the caching allocator's free blocks, so an unwritten output element shows up."""
    small = [torch.full((1 << 18,), float("nan"), device=device) for _ in range(8)]  # 1 MiB: small pool
    large = torch.full((64 << 20,), float("nan"), device=device)
    del small, large


def launcher_for(case: Case, batch: int, config: Optional[tuple[int, int]] = None):
    from tileops.kernels.gdn.decode import KERNEL
    from tileops.kernels.plans.decode_tile import DecodeConfig

    spec = make_spec(case, batch)
    if config is None:
        chosen = KERNEL.default(spec)
    else:
        chosen = KERNEL.validate_config(DecodeConfig(block_v=config[0], threads=config[1]), spec)
    return KERNEL.build(chosen, spec)


def call(launch, args: dict) -> tuple[torch.Tensor, torch.Tensor]:
    return launch(args["q"], args["k"], args["v"], args["g"], args["beta"], args["initial_state"], None, None,
                  args["A_log"], args["dt_bias"])


def run_case(case: Case, batch: int = 3, config: Optional[tuple[int, int]] = None, seed: int = 0,
             launch=None) -> tuple[float, float]:
    """Relative errors (o, final_state) of one call against the float64 reference."""
    launch = launch or launcher_for(case, batch, config)
    args = make_inputs(case, batch, seed)
    poison_allocator(args["q"].device)
    o, state = call(launch, args)
    torch.cuda.synchronize()
    o_ref, state_ref = reference(case, args)
    assert o.shape == o_ref.shape and o.dtype == case.dtype
    assert state.shape == state_ref.shape and state.dtype == torch.float32
    return relative_error(o, o_ref), relative_error(state, state_ref)


def assert_close(case: Case, errors: tuple[float, float]) -> None:
    err_o, err_state = errors
    assert err_o < TOLERANCE[case.dtype], f"{case.name}: o rel. error {err_o:.2e}"
    assert err_state < STATE_TOLERANCE, f"{case.name}: final_state rel. error {err_state:.2e}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_matches_reference(case):
    assert_close(case, run_case(case, seed=zlib.crc32(case.name.encode())))


@pytest.mark.parametrize("config,v_first", list(itertools.product(CONFIGS, (False, True))),
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else ("vk" if x else "kv"))
def test_configs_match_reference(config, v_first):
    case = Case(v_first=v_first, l2norm=True, sigmoid=True, gate=True, group=2)
    assert_close(case, run_case(case, config=config, seed=7))


def test_new_batch_size_never_compiles(monkeypatch):
    import tilelang

    case = Case(l2norm=True, gate=True, sigmoid=True, group=2)
    launch = launcher_for(case, batch=2)
    programs = dict(launch.programs)

    def no_compile(*args, **kwargs):
        raise AssertionError("a new batch size must not compile")

    monkeypatch.setattr(tilelang, "compile", no_compile)
    for batch in (1, 5, 33, 130):
        assert_close(case, run_case(case, batch=batch, seed=batch, launch=launch))
    assert launch.programs == programs


def test_initial_state_is_not_modified():
    case = Case(l2norm=True)
    launch = launcher_for(case, batch=2)
    args = make_inputs(case, 2, seed=11)
    before = args["initial_state"].clone()
    _, state = call(launch, args)
    assert state.data_ptr() != args["initial_state"].data_ptr()
    assert torch.equal(args["initial_state"], before)


def test_strided_inputs():
    case = Case(group=2, sigmoid=True)
    launch = launcher_for(case, batch=3)
    args = make_inputs(case, 3, seed=5)
    wide = torch.cat([args["q"], args["k"]], dim=2)  # q and k as views into one [B, 1, 2H, K] tensor
    strided = dict(args, q=wide[:, :, :HEADS], k=wide[:, :, HEADS:])
    o, state = call(launch, strided)
    o_ref, state_ref = reference(case, args)
    assert_close(case, (relative_error(o, o_ref), relative_error(state, state_ref)))


def test_cuda_graph_replay():
    case = Case(l2norm=True, gate=True, sigmoid=True, group=2)
    launch = launcher_for(case, batch=4)
    static = make_inputs(case, 4, seed=1)
    call(launch, static)  # warm: every program exists before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, state = call(launch, static)
    for seed in (2, 3):
        fresh = make_inputs(case, 4, seed=seed)
        for name, x in fresh.items():
            static[name].copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        o_ref, state_ref = reference(case, fresh)
        assert_close(case, (relative_error(o, o_ref), relative_error(state, state_ref)))


def test_variant_compiled_on_first_use():
    """g and beta in the token dtype without a state: a second program, then reused."""
    case = Case(has_state=True)
    launch = launcher_for(case, batch=2)
    other = replace(case, has_state=False, fp32_params=False)
    assert_close(other, run_case(other, batch=2, launch=launch))
    count = len(launch.programs)
    assert_close(other, run_case(other, batch=3, seed=4, launch=launch))
    assert len(launch.programs) == count == 2


@pytest.mark.parametrize("gate", [False, True], ids=["given-gate", "gate-in-kernel"])
def test_a_reset_and_a_huge_a_log_are_exact_never_nan(gate):
    # A log decay of -inf forgets the state exactly; with the gate in the kernel, e^A_log beyond
    # fp32 (A_log 89 and 120) does the same, and where softplus underflows (a raw gate of -200)
    # the state is kept: -exp(A_log + log softplus), never inf * 0.
    case = Case(gate=gate, group=2)
    args = make_inputs(case, batch=4, seed=23)
    if gate:
        args["A_log"][:4] = torch.tensor([89.0, 120.0, 95.0, 0.5], device=args["A_log"].device)
        args["g"][1, 0, :3] = -200.0
    else:
        args["g"][0, 0, :] = float("-inf")
        args["g"][2, 0, 1] = float("-inf")
    o, state = call(launcher_for(case, batch=4), args)
    o_ref, state_ref = reference(case, args)
    assert torch.isfinite(o).all() and torch.isfinite(state).all()
    assert relative_error(o, o_ref) < TOLERANCE[case.dtype] and relative_error(state, state_ref) < STATE_TOLERANCE

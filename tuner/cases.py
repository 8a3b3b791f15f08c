"""A workload case turned into what runs: the op it describes and fresh random inputs for it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

import torch
import torch.nn.functional as F

import tileops.linear_attention as la
from tileops.cases import DTYPES, Case, log_decays
from tileops.targets import REFERENCE


class TrainingStep:
    """A training step as one callable, what a benchmark times: the chunked forward, then the
    backward on what it saved. Takes (do, q, k, v, x), x the betas (DeltaNet) or the log decays
    (GLA); returns the backward's gradients."""

    def __init__(self, op: str, forward: Any, backward: Any) -> None:
        self.op, self.forward, self.backward = op, forward, backward

    def __call__(self, do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 x: torch.Tensor) -> tuple:
        if self.op == "gla":
            return self.backward(q, k, v, x, self.forward(q, k, v, x).h, do, None)
        _, *saved = self.forward(q, k, v, x)
        return self.backward(do, q, k, v, x, *saved)


def make_op(case: Case, target: Optional[str] = None) -> Any:
    """The op instance a case describes (a ``TrainingStep`` for a training step)."""
    if case.entry == "train":
        return TrainingStep(case.op, *(make_op(call, target) for call in case.calls()))
    return getattr(la, case.op_class)(**dict(case.flags), target=target)


GATE16_OPS = ("kda", "gla")  # the families whose per-channel gate may come in the input dtype or in fp32


def make_inputs(case: Case, seed: int, dtype: Optional[torch.dtype] = None, gates: str = "benchmark",
                gate16: bool = False) -> tuple:
    """Fresh random arguments of ``case``'s call, in ``dtype`` (the case's unless given), never zeros
    but for zero gates: an inference op's (``_inference_inputs``) or a training call's
    (``_training_inputs``). ``gate16``: KDA's and GLA's per-channel gate in the call's dtype (as the
    specification has it) instead of fp32."""
    dtype = dtype or DTYPES[case.dtype]
    if case.entry is None:
        return _inference_inputs(case, seed, dtype, gates, gate16)
    return _training_inputs(case, seed, dtype, gates, gate16)


def _inference_inputs(case: Case, seed: int, dtype: torch.dtype, gates: str, gate16: bool = False) -> tuple:
    """Forward arguments of an inference op: keys normalised, decays drawn as ``gates`` says
    (``tileops.cases.log_decays``; the benchmarks' moderate ones by default), betas in (0, 1), a
    random fp32 initial state."""
    gen = torch.Generator().manual_seed(seed)
    flags = dict(case.flags)
    b = 1 if case.seqlens else case.batch
    t = sum(case.seqlens) if case.seqlens else case.tokens
    n = len(case.seqlens) if case.seqlens else case.batch
    h, hv, d = case.heads, case.value_heads, case.dim

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    def rand(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=gen, dtype=torch.float64)

    def decays(shape: tuple, scale: float) -> torch.Tensor:
        return log_decays(gates, shape, lambda s: randn(*s), lambda s: rand(*s), scale)

    q = randn(b, t, h, d)
    k = F.normalize(randn(b, t, h, d), dim=-1)
    v = randn(b, t, hv, d)
    state = 0.1 * randn(n, hv, d, d)
    cu = None
    if case.seqlens:
        cu = torch.tensor([0] + list(case.seqlens), dtype=torch.int64).cumsum(0).to(torch.int32)
    if case.op == "gla":
        g = decays((b, t, h, d), 16.0)
        args = [q, k, v, g]
    else:
        beta = torch.rand(b, t, hv, generator=gen, dtype=torch.float64) * 0.9 + 0.05
        if flags.get("use_beta_sigmoid_in_kernel"):
            beta = randn(b, t, hv)
        gate_shape = (b, t, hv, d) if case.op == "kda" else (b, t, hv)
        g = decays(gate_shape, 8.0) if case.op != "deltanet" else None
        args = [q, k, v] + ([g] if g is not None else []) + [beta]
    extras = [state, cu, None if cu is None else cu.clone()]
    if case.op in ("gdn", "kda"):
        a_log = randn(hv).div(4) if flags.get("use_gate_in_kernel") else None
        dt_bias = randn(hv * (d if case.op == "kda" else 1)).div(4) if flags.get("use_gate_in_kernel") else None
        extras += [a_log, dt_bias]
    device = torch.device(case.device)
    fp = torch.float64 if dtype == torch.float64 else torch.float32
    tokens = 4 if gate16 and case.op in GATE16_OPS else 3  # q, k, v (and g) in the call's dtype;
    # gates and betas otherwise in fp32, as models compute them
    cast = [x.to(device=device, dtype=dtype if i < tokens else fp) for i, x in enumerate(args)]
    out = [extras[0].to(device=device, dtype=fp), None if cu is None else cu.to(device), extras[2]]
    out += [None if x is None else x.to(device=device, dtype=fp) for x in extras[3:]]
    return tuple(cast + out)


def _training_inputs(case: Case, seed: int, dtype: torch.dtype, gates: str, gate16: bool = False) -> tuple:
    """A training call's arguments: the forward's q, k (normalised), v and its betas in (0, 1)
    (DeltaNet, BHSD) or its log decays drawn as ``gates`` says (GLA, BTHD), the betas and
    decays in fp32 as models compute them; the step's and DeltaNet's backward start with the
    output's gradient do, and the backward takes what the forward saved (DeltaNet: S, Aw, Au, w, u
    after its inputs; GLA: q, k, v, g, h, do and no final-state gradient), computed on the case's
    device (by the reference for a float64 call: the gate's)."""
    gen = torch.Generator().manual_seed(seed)
    gla = case.op == "gla"
    shape = (case.batch, case.tokens, case.heads, case.dim) if gla else (case.batch, case.heads, case.tokens, case.dim)
    q = torch.randn(shape, generator=gen, dtype=torch.float64)
    k = F.normalize(torch.randn(shape, generator=gen, dtype=torch.float64), dim=-1)
    v = torch.randn(shape, generator=gen, dtype=torch.float64)
    if gla:
        x = log_decays(gates, shape, lambda s: torch.randn(*s, generator=gen, dtype=torch.float64),
                       lambda s: torch.rand(*s, generator=gen, dtype=torch.float64), 16.0)
    else:
        x = torch.rand(shape[:3], generator=gen, dtype=torch.float64) * 0.9 + 0.05
    do = torch.randn(shape, generator=gen, dtype=torch.float64)
    device = torch.device(case.device)
    q, k, v, do = (t.to(device=device, dtype=dtype) for t in (q, k, v, do))
    x = x.to(device=device, dtype=dtype if gate16 and gla or dtype == torch.float64 else torch.float32)
    if case.entry == "train_fwd":
        return q, k, v, x
    if case.entry == "train":
        return do, q, k, v, x
    forward = make_op(replace(case, entry="train_fwd"), target=REFERENCE if dtype == torch.float64 else None)
    if gla:
        return q, k, v, x, forward(q, k, v, x).h, do, None
    _, *saved = forward(q, k, v, x)
    return (do, q, k, v, x, *saved)


def spec_for_arch(case: Case, arch: str, device_name: Optional[str] = None, gate16: bool = False) -> Any:
    """The CallSpec of ``case`` as an ``arch`` GPU would describe it, worked out on the CPU: what
    building a kernel for that GPU needs on a machine without one (compiling ahead of time)."""
    cpu_case = case.on("cpu")
    spec, _ = make_op(cpu_case).describe(*make_inputs(cpu_case, seed=0, gate16=gate16))
    return replace(spec, device=torch.device("cuda", 0), arch=arch,
                   device_name=device_name if device_name is not None else spec.device_name)

"""One candidate, start to finish: build → correctness gate → timing. Runs inside the worker."""

from __future__ import annotations

import time
import traceback
from dataclasses import asdict, dataclass, replace
from typing import Optional

import torch

from tileops.kernels.registry import get_kernel
from tileops.cases import Case
from tileops.tuner.cases import make_inputs, make_op
from tileops.tuner.gate import TOLERANCE, as_outputs, worst_error
from tileops.tuner.timing import time_call


@dataclass(frozen=True)
class Job:
    """A candidate to evaluate: kernel, config (JSON), case (JSON) and the input seed."""

    kernel: str
    config: str
    case: str
    seed: int
    time_twice: bool = False


@dataclass
class Outcome:
    """What a candidate did: a trial row's measurements."""

    status: str
    median_ms: Optional[float] = None
    p20_ms: Optional[float] = None
    p80_ms: Optional[float] = None
    repeats: Optional[int] = None
    rel_error: Optional[float] = None
    compile_s: Optional[float] = None
    noise: Optional[float] = None
    error: Optional[str] = None

    def as_dict(self) -> dict:
        return asdict(self)


def gate_case(case: Case) -> Case:
    """A smaller call of the same compiled program (lengths and batch are run-time values), so
    the float64 reference stays cheap on big workloads. A training call keeps whole 64-token
    chunks, the only lengths its chunked kernels take; an inference call ends in a cut chunk."""
    if case.seqlens:
        lengths = tuple(min(n, 300) for n in case.seqlens[:6]) + (1,)
        return replace(case, seqlens=lengths, tokens=sum(lengths))
    return replace(case, batch=min(case.batch, 4), tokens=min(case.tokens, 640 if case.entry else 700))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


_references: dict[tuple[str, int], tuple] = {}


def _reference(case: Case, seed: int) -> tuple:
    """Float64 outputs of the reference target, cached per (case, seed) inside the worker."""
    key = (case.to_json(), seed)
    if key not in _references:
        inputs = make_inputs(case, seed, torch.float64)
        _references[key] = as_outputs(make_op(case, target="reference")(*inputs))
    return _references[key]


_arguments: dict[tuple[str, int], tuple] = {}


def _timed_arguments(case: Case, seed: int) -> tuple:
    """The full call's arguments, kept for the key's next candidates: every trial of a key times the
    same inputs, and drawing a big call's in float64 on the host took seconds a trial. One call's
    at a time, so that a long run holds one set on the device."""
    key = (case.to_json(), seed)
    if key not in _arguments:
        _arguments.clear()
        _arguments[key] = make_op(case).describe(*make_inputs(case, seed))[1]
    return _arguments[key]


def evaluate(job: Job) -> Outcome:
    """Build, check and time one config; every failure becomes an Outcome, never an exception."""
    case = Case.from_json(job.case)
    kernel = get_kernel(job.kernel)
    small = gate_case(case)
    spec, small_args = make_op(small).describe(*make_inputs(small, job.seed))
    reason = kernel.refuse(spec)
    if reason is not None:
        return Outcome("invalid", error=f"kernel refuses the call: {reason}")
    try:
        config = kernel.validate_config(job.config, spec)
    except ValueError as err:
        return Outcome("invalid", error=str(err))
    try:
        start = time.perf_counter()
        launcher = kernel.build(config, spec)
        out = launcher(*small_args)
        _sync(spec.device)
        compile_s = time.perf_counter() - start
    except Exception:
        return Outcome("compile_error", error=traceback.format_exc(limit=4)[-2000:])
    error = worst_error(as_outputs(out), _reference(small, job.seed))
    if not error <= TOLERANCE[case.dtype]:
        return Outcome("wrong", rel_error=error, compile_s=compile_s,
                       error=f"relative error {error:.3g} above the {case.dtype} tolerance {TOLERANCE[case.dtype]:g}")
    args = _timed_arguments(case, job.seed + 1)
    timing = time_call(lambda: launcher(*args), spec.device)
    noise = None
    if job.time_twice:
        again = time_call(lambda: launcher(*args), spec.device)
        noise = abs(again.median_ms - timing.median_ms) / min(again.median_ms, timing.median_ms)
    return Outcome("ok", timing.median_ms, timing.p20_ms, timing.p80_ms, timing.repeats, error, compile_s, noise)

"""Pre-compiling winners, so that the first op call of a fresh process finds its kernel in
TileLang's disk cache instead of compiling it."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Iterable, Optional

import torch

from tileops.callspec import CallSpec, make_flags
from tileops.db.key import TuningKey
from tileops.db.schemas import WinnerRecord, record_key
from tileops.dispatch.compile_cache import built
from tileops.device import current_arch
from tileops.kernels.registry import get_kernel
from tileops.cases import Case
from tileops.tuner.cases import GATE16_OPS, make_inputs, make_op, spec_for_arch

# The most a warm-up call may allocate for its inputs and state: a compile needs only a small
# call, so a row whose recorded call asks for more is refused, not trusted.
MAX_WARM_BYTES = 256 << 20


def call_bytes(case: Case) -> int:
    """An upper bound on the bytes of a case's inputs and state (8 bytes an element)."""
    rows = len(case.seqlens) if case.seqlens else case.batch
    tokens = sum(case.seqlens) if case.seqlens else case.batch * case.tokens
    per_token = 2 * case.heads * case.dim + case.value_heads * (3 * case.dim + 2)
    return 8 * (tokens * per_token + rows * case.value_heads * case.dim * case.dim)


def checked_case(record: WinnerRecord) -> Case:
    """The smallest case of a winner's recorded call, refused (ValueError) when it does not match
    the row's key or would allocate more than ``MAX_WARM_BYTES``."""
    try:
        case = Case.from_json(record.call).smallest()
    except (ValueError, TypeError, KeyError) as err:
        raise ValueError(f"winner {record.kernel} has a recorded call that is not a case ({err})") from None
    if case.op != record.op or case.dim != record.dim_k or case.dim != record.dim_v or case.dtype != record.dtype:
        raise ValueError(f"winner {record.kernel}: its recorded call ({case.label}) is not of its key "
                         f"({record.op} K{record.dim_k} V{record.dim_v} {record.dtype})")
    size = call_bytes(case)
    if size > MAX_WARM_BYTES or min(case.batch, case.tokens, case.heads, case.value_heads, case.dim) < 1:
        raise ValueError(f"winner {record.kernel}: its recorded call ({case.label}) would allocate "
                         f"{size / 2**20:.0f} MiB to compile, more than the {MAX_WARM_BYTES >> 20} MiB a warm-up "
                         "allows; re-tune that key or prune the row")
    return case


def decode_forms(spec: CallSpec) -> tuple[CallSpec, ...]:
    """A decode call with beta (the delta rule's) and GDN's gate per head each in fp32 and in the
    input dtype: the step reads both as they come, so each form is a program (the tuned config
    serves all); any other call as it is. KDA's and GLA's gate forms come from ``make_inputs``."""
    if spec.mode not in ("decode", "step") or spec.dtype == torch.float32:
        return (spec,)
    forms = [spec]
    if spec.op != "gla":
        forms += [replace(s, flags=make_flags(**dict(s.flags, beta_dtype=spec.dtype_name))) for s in forms]
    if spec.op == "gdn":
        forms += [replace(s, flags=make_flags(**dict(s.flags, gate_dtype=None))) for s in forms]
    return tuple(forms)


def compile_winner(record: WinnerRecord) -> None:
    """Build a winner's kernel for the call it was tuned on (any length: lengths are run-time).

    On a machine with the winner's device the build goes through dispatch's compile cache and
    runs nothing; for another architecture (a CPU machine filling the cache ahead of a GPU one)
    the call is described on the CPU and the kernel compiled for that architecture.
    Raises ValueError when the row does not say which call it was tuned on, or when that call
    does not fit the row or a warm-up's allocation bound (``checked_case``).
    """
    if not record.call:
        raise ValueError(f"winner {record.kernel} has no recorded call to compile for")
    kernel = get_kernel(record.kernel)
    case = checked_case(record)
    # KDA's and GLA's gate in fp32 and in the input dtype: a program each, since their prefill's first
    # pass and their decode step read g as it comes (the tuned config serves both), so that neither
    # caller's first call compiles; a decode step's beta and GDN's gate likewise (``decode_forms``).
    gate_forms = (False, True) if case.op in GATE16_OPS else (False,)
    if record.arch != current_arch():
        for gate16 in gate_forms:
            for spec in decode_forms(spec_for_arch(case, record.arch, record.device_name, gate16)):
                kernel.build(kernel.validate_config(record.config, spec), spec)
        return
    case = case.on("cuda" if record.arch.startswith("sm") else "cpu")
    for gate16 in gate_forms:
        spec, _ = make_op(case).describe(*make_inputs(case, seed=0, gate16=gate16))
        for form in decode_forms(spec):
            built(kernel, kernel.validate_config(record.config, form), form)
    if spec.device.type == "cuda":
        torch.cuda.synchronize()


def unplaced(key: TuningKey) -> TuningKey:
    """A key without its device name: what a winner of any card of the architecture covers."""
    return replace(key, device_name="")


def preset_defaults(arch: str, device_name: str, op: Optional[str],
                    winners: Iterable[WinnerRecord]) -> list[WinnerRecord]:
    """The calls of the op's GPU preset (every family's where ``op`` is None) whose keys no winner
    covers, each as a record of its kernel's default config for that call (chosen for the call's
    own lengths) and marked ``time_ms`` 1: warmed like the winners, so that the first call of a
    preset workload compiles nothing though nothing was tuned for its key. None on a CPU."""
    from tileops.tuner.plan import plan
    from tileops.tuner.presets import GPU_PRESET, cases_for

    if not arch.startswith("sm"):
        return []
    covered = {unplaced(record_key(row)) for row in winners}
    records = []
    for family in [op] if op else list(GPU_PRESET):
        for case in cases_for(family, arch, [], None, None):
            for call, task, _ in plan(case.on("cuda"), arch, device_name):
                if task is None or unplaced(task.key) in covered:
                    continue
                covered.add(unplaced(task.key))
                records.append(WinnerRecord(**asdict(task.key), config=task.kernel.default(task.spec).model_dump(),
                                            time_ms=1.0, source_hash=task.kernel.source_hash, call=call.to_json()))
    return records

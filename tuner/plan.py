"""Which keys a tuning run covers: cases → the kernel that serves each → its tuning key."""

from __future__ import annotations

from dataclasses import replace

from dispatch.key import key_for
from dispatch.router import first_accepting
from tileops.targets import BUILTIN, REFERENCE
from tuner.cases import OP_CLASSES, Case, make_inputs, make_op
from tuner.study import KeyTask


def plan(case: Case, arch: str) -> tuple[KeyTask | None, str]:
    """The task for one case, or (None, why it cannot be tuned on this architecture)."""
    small = case.smallest()
    spec, _ = make_op(small).describe(*make_inputs(small, seed=0))
    n = len(case.seqlens) if case.seqlens else case.batch
    spec = replace(spec, batch=n, tokens=sum(case.seqlens) if case.seqlens else case.tokens)
    target = REFERENCE if arch == "cpu" else BUILTIN
    kernel, refusals = first_accepting(target, OP_CLASSES[case.op], spec)
    if kernel is None:
        return None, "; ".join(refusals) or f"no {target} kernel for {case.op}"
    return KeyTask(case, kernel, key_for(kernel.name, spec), spec), ""

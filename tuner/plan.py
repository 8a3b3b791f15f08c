"""Which keys a tuning run covers: cases → the op calls each is made of → the kernel that serves
each call → its tuning key."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import torch

from tileops.dispatch.key import key_for
from tileops.dispatch.router import first_accepting
from tileops.targets import BUILTIN, REFERENCE
from tileops.cases import Case
from tileops.tuner.cases import make_inputs, make_op
from tileops.tuner.study import KeyTask


def plan(case: Case, arch: str, device_name: str) -> list[tuple[Case, Optional[KeyTask], str]]:
    """One (call, task, why not) per op call of ``case`` (``Case.calls``: a training step's forward
    and backward, each with its own kernel and key, else the case itself); the task is None, and
    why says why, when the call cannot be tuned on this architecture."""
    return [(call, *_plan_call(call, arch, device_name)) for call in case.calls()]


def _plan_call(case: Case, arch: str, device_name: str) -> tuple[Optional[KeyTask], str]:
    """The task for one op call, or (None, why it cannot be tuned on this architecture).

    The call is described from small CPU tensors and then placed on the case's device, so a plan
    (and a compile-only run) needs no GPU.
    """
    small = case.smallest().on("cpu")
    spec, _ = make_op(small).describe(*make_inputs(small, seed=0))
    n = len(case.seqlens) if case.seqlens else case.batch
    spec = replace(spec, batch=n, tokens=sum(case.seqlens) if case.seqlens else case.tokens,
                   device=torch.device(case.device, 0) if case.device == "cuda" else torch.device(case.device),
                   arch=arch, device_name=device_name)
    target = REFERENCE if arch == "cpu" else BUILTIN
    kernel, refusals = first_accepting(target, case.op_class, spec)
    if kernel is None:
        return None, "; ".join(refusals) or f"no {target} kernel for {case.label}"
    return KeyTask(case, kernel, key_for(kernel.name, spec), spec), ""

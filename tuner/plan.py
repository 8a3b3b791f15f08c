"""Which keys a tuning run covers: cases → the kernel that serves each → its tuning key."""

from __future__ import annotations

from dataclasses import replace

import torch

from tileops.dispatch.key import key_for
from tileops.dispatch.router import first_accepting
from tileops.targets import BUILTIN, REFERENCE
from tileops.cases import OP_CLASSES, Case
from tileops.tuner.cases import make_inputs, make_op
from tileops.tuner.study import KeyTask


def plan(case: Case, arch: str, device_name: str) -> tuple[KeyTask | None, str]:
    """The task for one case, or (None, why it cannot be tuned on this architecture).

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
    kernel, refusals = first_accepting(target, OP_CLASSES[case.op], spec)
    if kernel is None:
        return None, "; ".join(refusals) or f"no {target} kernel for {case.op}"
    return KeyTask(case, kernel, key_for(kernel.name, spec), spec), ""

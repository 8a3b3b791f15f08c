"""Pre-compiling winners, so that the first op call of a fresh process finds its kernel in
TileLang's disk cache instead of compiling it."""

from __future__ import annotations

import torch

from tileops.db.schemas import WinnerRecord
from tileops.dispatch.compile_cache import built
from tileops.device import current_arch
from tileops.kernels.registry import get_kernel
from tileops.cases import Case
from tileops.tuner.cases import make_inputs, make_op, spec_for_arch


def compile_winner(record: WinnerRecord) -> None:
    """Build a winner's kernel for the call it was tuned on (any length: lengths are run-time).

    On a machine with the winner's device the build goes through dispatch's compile cache and
    runs nothing; for another architecture (a CPU machine filling the cache ahead of a GPU one)
    the call is described on the CPU and the kernel compiled for that architecture.
    Raises ValueError when the row does not say which call it was tuned on.
    """
    if not record.call:
        raise ValueError(f"winner {record.kernel} has no recorded call to compile for")
    kernel = get_kernel(record.kernel)
    case = Case.from_json(record.call).smallest()
    if record.arch != current_arch():
        spec = spec_for_arch(case, record.arch, record.device_name)
        kernel.build(kernel.validate_config(record.config, spec), spec)
        return
    case = case.on("cuda" if record.arch.startswith("sm") else "cpu")
    spec, _ = make_op(case).describe(*make_inputs(case, seed=0))
    built(kernel, kernel.validate_config(record.config, spec), spec)
    if spec.device.type == "cuda":
        torch.cuda.synchronize()

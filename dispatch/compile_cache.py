"""The in-process cache of built kernels, keyed on (kernel, config, program facts).

TileLang keeps its own disk cache beneath this one, so a fresh process that finds a kernel
there loads it instead of compiling. Building never happens during CUDA-graph capture, and a
build after ``end_warmup()`` warns (CompileAfterWarmupWarning; an error under TILEOPS_STRICT=1).
"""

from __future__ import annotations

import torch

from tileops.callspec import CallSpec
from tileops.errors import CompileAfterWarmupWarning, warn_or_raise
from tileops.kernels.base import KernelDef, Launcher
from tileops.kernels.config import KernelConfig

_BUILT: dict[tuple, Launcher] = {}
_warm = False


class CompileDuringCapture(RuntimeError):
    """A kernel would have to be compiled while a CUDA graph is being captured."""


def built(kernel: KernelDef, config: KernelConfig, spec: CallSpec) -> Launcher:
    """The launcher of ``kernel`` under ``config`` for calls shaped like ``spec``; builds once."""
    key = (kernel.name, config.to_json(), spec.program_facts)
    launcher = _BUILT.get(key)
    if launcher is None:
        if spec.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise CompileDuringCapture(
                f"{spec.entry} would compile kernel {kernel.name} while a CUDA graph is being captured; "
                "call the op once with the same shapes before capturing (or run `tileops-db warm`)")
        if _warm:
            warn_or_raise(CompileAfterWarmupWarning,
                          f"{spec.entry} builds kernel {kernel.name} with config {config.to_json()} on the call "
                          "path after warm-up; call it with these shapes during warm-up (or run `tileops-db warm`)")
        launcher = _BUILT[key] = kernel.build(config, spec)
    return launcher


def end_warmup(done: bool = True) -> None:
    """Mark warm-up over (or, with ``done=False``, not yet): from then on every kernel built on
    the call path is a CompileAfterWarmupWarning."""
    global _warm
    _warm = done


def clear() -> None:
    """Forget every built launcher (TileLang's disk cache stays)."""
    _BUILT.clear()

"""The in-process cache of built kernels, keyed on (kernel, config, program facts).

TileLang keeps its own disk cache beneath this one, so a fresh process that finds a kernel
there loads it instead of compiling. Building never happens during CUDA-graph capture.
"""

from __future__ import annotations

import torch

from tileops.callspec import CallSpec
from tileops.kernels.base import KernelDef, Launcher
from tileops.kernels.config import KernelConfig

_BUILT: dict[tuple, Launcher] = {}


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
        launcher = _BUILT[key] = kernel.build(config, spec)
    return launcher


def clear() -> None:
    """Forget every built launcher (TileLang's disk cache stays)."""
    _BUILT.clear()

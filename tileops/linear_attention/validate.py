"""Argument checks that run before any work, with errors that name the argument.

``Shapes`` binds named dimensions (B, T, H, K, ...) as tensors are checked, so a mismatch says
which earlier argument fixed the size: ``k: dim K is 64, but q set K = 128``.
"""

from __future__ import annotations

import math
import os
from typing import Iterable, Optional, Sequence, Union

import torch

from tileops.errors import host_read

HALF = (torch.float16, torch.bfloat16)
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INDEX = (torch.int32, torch.int64)
# Heads and widths: a zero among them leaves nothing to compute and divides by zero downstream.
NONEMPTY_DIMS = frozenset({"H", "HV", "K", "V", "DK", "DV"})
# The largest chunk: a chunk is a C × C block per head (and DeltaNet returns [.., S, BC] tensors).
MAX_CHUNK_SIZE = 1024
# Set to 1 to check device offsets against cu_seqlens_cpu on every call (one device-to-host copy).
DEBUG_ENV = "TILEOPS_DEBUG"


def _names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in dtypes)


def _layout(layout: Sequence[Union[str, int]]) -> str:
    return "[" + ", ".join(str(d) for d in layout) + "]"


class Shapes:
    """Checks tensors against named layouts and remembers the sizes they fix."""

    def __init__(self) -> None:
        self.sizes: dict[str, int] = {}
        self._set_by: dict[str, str] = {}
        self.device: Optional[torch.device] = None
        self._device_by = ""
        self._dtypes: dict[torch.dtype, str] = {}

    def bind(self, dim: str, size: int, by: str) -> None:
        """Fix a named size (e.g. N from cu_seqlens) as if a tensor had set it."""
        self.sizes[dim] = size
        self._set_by[dim] = by

    def tensor(self, name: str, t: object, layout: Sequence[Union[str, int]],
               dtypes: Sequence[torch.dtype], *, device: bool = True) -> torch.Tensor:
        """Check rank, named sizes, dtype and device of ``t``; returns it."""
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        shape = t.shape
        if len(shape) != len(layout):
            raise ValueError(f"{name} must be {len(layout)}-D {_layout(layout)}, got {t.dim()}-D shape {list(shape)}")
        sizes = self.sizes
        for dim, size in zip(layout, shape):
            known = dim if isinstance(dim, int) else sizes.get(dim)
            if known is None:
                if size == 0 and dim in NONEMPTY_DIMS:
                    raise ValueError(f"{name} has {dim} = 0 (shape {list(shape)}, layout {_layout(layout)}); "
                                     "heads and widths must be at least 1")
                self.bind(dim, size, name)
            elif known != size:
                raise ValueError(self._mismatch(name, dim, size, layout, shape))
        if t.dtype not in dtypes:
            raise TypeError(self._wrong_dtype(name, t.dtype, dtypes))
        self._dtypes.setdefault(t.dtype, name)
        if device:
            if self.device is None:
                self.device, self._device_by = t.device, name
            elif t.device != self.device:
                raise ValueError(f"{name} is on {t.device}, but {self._device_by} is on {self.device}; "
                                 "all tensors of a call must be on one device")
        return t

    def _wrong_dtype(self, name: str, dtype: torch.dtype, dtypes: Sequence[torch.dtype]) -> str:
        shown = _names((dtype,))
        if dtype in FLOATS and len(dtypes) == 1 and dtypes[0] in self._dtypes:
            other = self._dtypes[dtypes[0]]
            return (f"{name} is {shown} but {other} is {_names(dtypes)}; they must share one dtype "
                    f"(convert with {name}.to({other}.dtype))")
        return f"{name}: dtype {shown} is not supported; expected {_names(dtypes)}"

    def _mismatch(self, name: str, dim: Union[str, int], size: int, layout: Sequence, shape: Sequence) -> str:
        expected = f"expected {_layout(layout)}, got {list(shape)}"
        if isinstance(dim, int):
            return f"{name} must have shape {_layout(layout)}, got {list(shape)}"
        return f"{name}: dim {dim} is {size}, but {self._set_by[dim]} set {dim} = {self.sizes[dim]} ({expected})"

    def optional(self, name: str, t: object, layout: Sequence[Union[str, int]],
                 dtypes: Sequence[torch.dtype]) -> Optional[torch.Tensor]:
        """Like ``tensor`` for an argument that may be None."""
        return None if t is None else self.tensor(name, t, layout, dtypes)


def state_dtypes(dtype: torch.dtype) -> tuple[torch.dtype, ...]:
    """States are fp32; a float64 call (the reference in full precision) keeps float64 states."""
    return (torch.float64,) if dtype == torch.float64 else (torch.float32,)


def param_dtypes(dtype: torch.dtype) -> tuple[torch.dtype, ...]:
    """Gates, betas and gate parameters: the input dtype or fp32 (fp64 for a float64 call)."""
    return (torch.float64,) if dtype == torch.float64 else tuple(dict.fromkeys((dtype, torch.float32)))


def require(condition: bool, message: str) -> None:
    """Raise ValueError(message) unless ``condition``."""
    if not condition:
        raise ValueError(message)


def positive_scale(name: str, scale: Optional[float], dim_k: int) -> float:
    """``scale`` checked as a finite positive number, or K**-0.5 when None."""
    if scale is None:
        return dim_k ** -0.5
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"{name} must be a finite positive number or None, got {scale!r}")
    return float(scale)


def chunk_size_arg(chunk_size: object) -> int:
    """A chunk size is an int in [1, MAX_CHUNK_SIZE]."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or not 1 <= chunk_size <= MAX_CHUNK_SIZE:
        raise ValueError(f"chunk_size must be a positive int of at most {MAX_CHUNK_SIZE} (64 is the usual "
                         f"choice), got {chunk_size!r}")
    return chunk_size


def negative_bound(name: str, value: object) -> float:
    """A log-space bound: a finite negative number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value >= 0:
        raise ValueError(f"{name} must be a finite negative number (a log-space bound), got {value!r}")
    return float(value)


def check_offsets(name: str, values: Sequence[int], total: int) -> None:
    """Sequence offsets start at 0, never decrease and end at the packed token count."""
    require(values[0] == 0, f"{name} must start at 0, got {values[0]}")
    for i in range(1, len(values)):
        if values[i] < values[i - 1]:
            raise ValueError(f"{name} must be non-decreasing, but {name}[{i}] = {values[i]} < "
                             f"{name}[{i - 1}] = {values[i - 1]}")
    require(values[-1] == total, f"{name} must end at T = {total} (the packed token count), got {values[-1]}")


def check_varlen(shapes: Shapes, cu_seqlens: object, cu_seqlens_cpu: object) -> int:
    """Validate the packed-sequence offsets and return the number of sequences N.

    The values are read from ``cu_seqlens_cpu`` when given; otherwise from ``cu_seqlens``, which
    costs one device-to-host copy unless a CUDA graph is being captured (then the caller's
    offsets are trusted: pass ``cu_seqlens_cpu`` to keep them checked). Both given must agree:
    checked always when both are on the CPU, and for device offsets with ``TILEOPS_DEBUG=1``
    (one device-to-host copy, so not by default).
    """
    batch, total = shapes.sizes["B"], shapes.sizes["T"]
    if cu_seqlens is None:
        require(cu_seqlens_cpu is None, "cu_seqlens_cpu was given without cu_seqlens; pass both or neither")
        return batch
    shapes.tensor("cu_seqlens", cu_seqlens, ["N+1"], INDEX)
    require(cu_seqlens.numel() >= 2, f"cu_seqlens must hold at least 2 offsets, got {cu_seqlens.numel()}")
    require(batch == 1, f"packed varlen (cu_seqlens given) needs B == 1, got B = {batch}")
    if cu_seqlens_cpu is not None:
        host = Shapes()
        host.bind("N+1", cu_seqlens.numel(), "cu_seqlens")
        host.tensor("cu_seqlens_cpu", cu_seqlens_cpu, ["N+1"], INDEX, device=False)
        require(cu_seqlens_cpu.device.type == "cpu",
                f"cu_seqlens_cpu must be on the CPU, got {cu_seqlens_cpu.device}")
        check_offsets("cu_seqlens_cpu", cu_seqlens_cpu.tolist(), total)
        if cu_seqlens.device.type == "cpu" or _debug():
            _check_agree(cu_seqlens, cu_seqlens_cpu)
    elif not (cu_seqlens.is_cuda and torch.cuda.is_current_stream_capturing()):
        if cu_seqlens.is_cuda:
            host_read("cu_seqlens (pass cu_seqlens_cpu too, and its offsets are checked on the host)")
        check_offsets("cu_seqlens", cu_seqlens.tolist(), total)
    return cu_seqlens.numel() - 1


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _check_agree(cu_seqlens: torch.Tensor, cu_seqlens_cpu: torch.Tensor) -> None:
    """cu_seqlens and cu_seqlens_cpu hold the same offsets (the kernels read the first, checks the second)."""
    device_values, host_values = cu_seqlens.tolist(), cu_seqlens_cpu.tolist()
    if device_values != host_values:
        first = next(i for i, (a, b) in enumerate(zip(device_values, host_values)) if a != b)
        raise ValueError(f"cu_seqlens and cu_seqlens_cpu disagree: cu_seqlens[{first}] = {device_values[first]}, "
                         f"cu_seqlens_cpu[{first}] = {host_values[first]}; pass the same offsets in both")

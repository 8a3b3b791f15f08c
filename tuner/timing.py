"""The timing protocol: warm-up, then the median of many repeats.

On CUDA each repeat is bracketed by CUDA events after an L2 flush (a write larger than the
cache), so a kernel never reads warm inputs; on CPU ``perf_counter`` times each repeat.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

_FLUSH_BYTES = 256 << 20


@dataclass(frozen=True)
class Timing:
    """Milliseconds: median, 20th and 80th percentile over ``repeats`` runs."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    repeats: int


def _summary(samples: list[float]) -> Timing:
    samples = sorted(samples)
    pick = lambda f: samples[min(len(samples) - 1, int(f * len(samples)))]  # noqa: E731
    return Timing(statistics.median(samples), pick(0.2), pick(0.8), len(samples))


def time_cpu(fn: Callable[[], object], *, warmup: int = 2, repeats: int = 7, budget_s: float = 5.0) -> Timing:
    """Median wall time of ``fn`` on the host; stops early once ``budget_s`` is spent."""
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < repeats and (len(samples) < 3 or time.perf_counter() < deadline):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return _summary(samples)


def time_cuda(fn: Callable[[], object], *, warmup: int = 5, repeats: int = 50) -> Timing:
    """Median device time of ``fn`` with CUDA events, the L2 flushed before each repeat."""
    flush = torch.empty(_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return _summary([s.elapsed_time(e) for s, e in events])


def time_call(fn: Callable[[], object], device: torch.device) -> Timing:
    """The protocol that fits the device."""
    return time_cuda(fn) if device.type == "cuda" else time_cpu(fn)

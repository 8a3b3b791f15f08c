"""The tuning key: which row of the tuning database applies to a call."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from tileops.callspec import CallSpec


def log2_bucket(n: int) -> int:
    """ceil(log2(n)) for n >= 1: the bucket of a size, so that 3000 and 4096 share one."""
    return max(0, math.ceil(math.log2(max(1, n))))


def flags_json(flags: tuple[tuple[str, object], ...]) -> str:
    """Canonical JSON text of a flag tuple: the form a key stores and compares."""
    return json.dumps(dict(flags), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class TuningKey:
    """One tuning key. ``flags`` is the canonical JSON of the call's tuned flags and its mode;
    ``bucket_tokens`` is log2 of tokens per sequence (0 for decode),
    ``bucket_rows`` log2 of sequences × value heads: the two sizes that move the best config."""

    op: str
    kernel: str
    arch: str
    device_name: str
    dtype: str
    dim_k: int
    dim_v: int
    flags: str
    bucket_tokens: int
    bucket_rows: int

    @property
    def family(self) -> tuple:
        """The key without device and bucket: rows that may stand in for one another."""
        return (self.op, self.kernel, self.arch, self.dtype, self.dim_k, self.dim_v, self.flags)


def tokens_per_sequence(spec: CallSpec) -> int:
    """Mean tokens per sequence: the packed total shared out over the sequences for varlen."""
    if spec.mode == "varlen":
        return max(1, spec.tokens // max(1, spec.batch))
    return spec.tokens


def key_for(kernel_name: str, spec: CallSpec) -> TuningKey:
    """The tuning key of a call served by ``kernel_name``."""
    return TuningKey(
        op=spec.op,
        kernel=kernel_name,
        arch=spec.arch,
        device_name=spec.device_name,
        dtype=spec.dtype_name,
        dim_k=spec.dim_k,
        dim_v=spec.dim_v,
        flags=flags_json(spec.tuned_flags + (("mode", spec.mode),)),
        bucket_tokens=log2_bucket(tokens_per_sequence(spec)),
        bucket_rows=log2_bucket(spec.batch * spec.value_heads),
    )

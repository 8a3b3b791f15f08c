"""The tuning key of a call: which rows of the tuning database apply to it."""

from __future__ import annotations

import math

from tileops.callspec import CallSpec
from tileops.db.key import TuningKey, flags_json


def log2_bucket(n: int) -> int:
    """ceil(log2(n)) for n >= 1: the bucket of a size, so that 3000 and 4096 share one."""
    return max(0, math.ceil(math.log2(max(1, n))))


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

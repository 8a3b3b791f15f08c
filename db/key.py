"""The tuning key: the record that names which stored rows apply to a call.

Its fields are the key columns of the trial and winner tables. Making a key from a call is
dispatch's work (``tileops.dispatch.key.key_for``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields


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


KEY_COLUMNS = tuple(f.name for f in fields(TuningKey))

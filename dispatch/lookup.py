"""The config chain: user database → shipped snapshot → nearest bucket → the kernel's default.

A row is used only if its kernel still exists, its config validates against the kernel's
current schema for this call, and its source hash matches the kernel's (else it is stale).
Selections are cached per tuning key, so after the first lookup of a key no database is read.
The rows passed over are listed in the selection; the router warns of each (TuningRowWarning).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from tileops.callspec import CallSpec
from tileops.db.key import TuningKey
from tileops.db.schemas import WinnerRecord
from tileops.dispatch.key import key_for
from tileops.dispatch.snapshot import shipped_matching
from tileops.dispatch.usable import usable
from tileops.dispatch.userdb import UserDatabase
from tileops.kernels.base import KernelDef
from tileops.kernels.config import KernelConfig


@dataclass(frozen=True)
class Selection:
    """The config chosen for a key, where it came from, and the rows passed over on the way."""

    key: TuningKey
    config: KernelConfig
    source: str
    row: Optional[WinnerRecord] = None
    passed_over: tuple[str, ...] = field(default=())


_SELECTIONS: dict[TuningKey, Selection] = {}
_user_db: Optional[UserDatabase] = None


def user_database() -> UserDatabase:
    """The process-wide user database handle (opened on first use)."""
    global _user_db
    if _user_db is None:
        _user_db = UserDatabase()
    return _user_db


def reset() -> None:
    """Forget cached selections and the database handle (after $TILEOPS_DB or rows change)."""
    global _user_db
    _SELECTIONS.clear()
    _user_db = None


def _distance(key: TuningKey, row: WinnerRecord) -> tuple[int, int]:
    """(other device, bucket distance): how far a row's key is from the call's."""
    return (int(row.device_name != key.device_name),
            abs(row.bucket_tokens - key.bucket_tokens) + abs(row.bucket_rows - key.bucket_rows))


def _family_filters(key: TuningKey) -> dict:
    return dict(op=key.op, kernel=key.kernel, arch=key.arch, dtype=key.dtype, dim_k=key.dim_k,
                dim_v=key.dim_v, flags=key.flags)


def select(kernel: KernelDef, spec: CallSpec) -> Selection:
    """The config for ``kernel`` on this call (cached per tuning key)."""
    key = key_for(kernel.name, spec)
    cached = _SELECTIONS.get(key)
    if cached is None:
        cached = _SELECTIONS[key] = _choose(kernel, spec, key)
    return cached


def _choose(kernel: KernelDef, spec: CallSpec, key: TuningKey) -> Selection:
    filters = _family_filters(key)
    sources = (("user", user_database().nearest(key)), ("shipped", shipped_matching(filters)))
    passed_over: list[str] = []
    candidates = []
    for rank, (source, rows) in enumerate(sources):
        for row in rows:
            config, why = usable(row, spec, kernel)
            if config is None:
                passed_over.append(f"{source} row {row.device_name} t{row.bucket_tokens}/r{row.bucket_rows}: {why}")
                continue
            device, buckets = _distance(key, row)
            candidates.append(((device, buckets, rank, config.to_json()), source, config, row))
    if candidates:
        (device, buckets, _, _), source, config, row = min(candidates, key=lambda c: c[0])
        if device or buckets:
            source = f"nearest {source} (bucket distance {buckets}{', other device' if device else ''})"
        return Selection(key, config, source, row, tuple(passed_over))
    return Selection(key, kernel.default(spec), "default", None, tuple(passed_over))

"""The shipped snapshot: read-only winners inside the package, one JSONL file per architecture."""

from __future__ import annotations

import functools
import warnings
from importlib import resources

from tileops.db.jsonl import read_winners
from tileops.db.schemas import WinnerRecord


@functools.lru_cache(maxsize=None)
def shipped_winners(arch: str) -> tuple[WinnerRecord, ...]:
    """Every valid row of ``tileops/snapshots/<arch>.jsonl`` (none when the file is absent)."""
    path = resources.files("tileops") / "snapshots" / f"{arch}.jsonl"
    if not path.is_file():
        return ()
    with resources.as_file(path) as real_path:
        records, rejects = read_winners(real_path)
    for line, reason in rejects:
        warnings.warn(f"shipped snapshot {arch}.jsonl line {line} skipped: {reason}", stacklevel=2)
    return tuple(records)


def shipped_matching(fields: dict) -> list[WinnerRecord]:
    """The shipped winners whose named key fields (``arch`` among them) equal the values given."""
    return [row for row in shipped_winners(fields["arch"])
            if all(getattr(row, name) == value for name, value in fields.items())]

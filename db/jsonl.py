"""Winners as JSON Lines: the form of shipped snapshots, exports and reviews.

One object per line with sorted keys, lines sorted by tuning key, database ids left out: the
same winners always give the same bytes, so a snapshot diffs well in git.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Union

from pydantic import ValidationError

from tileops.db.key import KEY_COLUMNS
from tileops.db.schemas import WinnerRecord, describe_errors


def sort_key(record: WinnerRecord) -> tuple:
    """The order of lines in a file: by tuning key."""
    return tuple(getattr(record, name) for name in KEY_COLUMNS)


def winner_line(record: WinnerRecord) -> str:
    """One record as its JSONL line (without the newline)."""
    return json.dumps(record.model_dump(mode="json", exclude={"id"}), sort_keys=True)


def export_winners(records: Iterable[WinnerRecord], destination: Union[str, os.PathLike, IO[str]]) -> int:
    """Write ``records`` as JSONL in key order to a path or a text stream; returns the count."""
    lines = sorted((sort_key(r), winner_line(r)) for r in records)
    text = "".join(line + "\n" for _, line in lines)
    if isinstance(destination, (str, os.PathLike)):
        Path(destination).write_text(text, encoding="utf-8")
    else:
        destination.write(text)
    return len(lines)


def read_winners(source: Any) -> tuple[list[WinnerRecord], list[tuple[int, str]]]:
    """The valid records of a JSONL file, and (line number, reason) for every line refused.

    ``source`` is a path, an ``importlib.resources`` file or a text stream. Blank lines are
    skipped; a second line for a key already seen is refused.
    """
    numbered, rejects = read_numbered_winners(source)
    return [record for _, record in numbered], rejects


def read_numbered_winners(source: Any) -> tuple[list[tuple[int, WinnerRecord]], list[tuple[int, str]]]:
    """``read_winners``, with the line number of every record."""
    records: list[tuple[int, WinnerRecord]] = []
    rejects: list[tuple[int, str]] = []
    first_line_of: dict[tuple, int] = {}
    for number, line in enumerate(_read_text(source).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = WinnerRecord.model_validate(json.loads(line))
        except json.JSONDecodeError as err:
            rejects.append((number, f"not JSON: {err.msg} at column {err.colno}"))
            continue
        except ValidationError as err:
            rejects.append((number, describe_errors(err)))
            continue
        key = sort_key(record)
        if key in first_line_of:
            rejects.append((number, f"same tuning key as line {first_line_of[key]}"))
            continue
        first_line_of[key] = number
        records.append((number, record))
    return records, rejects


def _read_text(source: Any) -> str:
    if isinstance(source, (str, os.PathLike)):
        source = Path(source)
    if hasattr(source, "read_text"):
        return source.read_text(encoding="utf-8")
    return source.read()


@dataclass
class WinnersDiff:
    """How winners B differ from winners A, matched by tuning key."""

    added: list[WinnerRecord] = field(default_factory=list)
    removed: list[WinnerRecord] = field(default_factory=list)
    changed: list[tuple[WinnerRecord, WinnerRecord]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def diff_winners(a: Iterable[WinnerRecord], b: Iterable[WinnerRecord]) -> WinnersDiff:
    """Keys only in ``b`` (added), only in ``a`` (removed), and in both with other contents
    (changed, as (old, new) pairs); database ids are ignored. Each list is in key order."""
    old = {sort_key(r): r for r in a}
    new = {sort_key(r): r for r in b}
    diff = WinnersDiff()
    for key in sorted(old.keys() | new.keys()):
        if key not in old:
            diff.added.append(new[key])
        elif key not in new:
            diff.removed.append(old[key])
        elif winner_line(old[key]) != winner_line(new[key]):
            diff.changed.append((old[key], new[key]))
    return diff

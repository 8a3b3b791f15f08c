"""Stored rows as records, without SQLAlchemy: the one conversion of the ORM store and of
dispatch's sqlite3 reader, each handing in a row as a mapping of column names to values."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, TypeVar

from pydantic import BaseModel, ValidationError

from tileops.db.key import KEY_COLUMNS
from tileops.db.schemas import WinnerRecord, describe_errors

R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True)
class MalformedRow:
    """A stored winner that is not a valid record (config that is not JSON, a value out of range):
    its id, its key cells as stored, and why. ``tileops-db show`` lists it; ``prune`` deletes it."""

    id: int
    key: dict[str, Any]
    reason: str


def as_record(model: type[R], values: Mapping[str, Any]) -> R:
    """A row's column values as a record (``config_json`` becomes ``config``)."""
    values = dict(values)
    if "config_json" in values:
        values["config"] = json.loads(values.pop("config_json"))
    return model.model_validate(values)


def winner_records(rows: Iterable[Mapping[str, Any]]) -> tuple[list[WinnerRecord], list[MalformedRow]]:
    """(valid winners, malformed rows) of winner rows, in their order: one bad row never fails a read."""
    good, bad = [], []
    for values in rows:
        try:
            good.append(as_record(WinnerRecord, values))
        except (ValueError, ValidationError) as err:  # json's errors are ValueErrors
            reason = describe_errors(err) if isinstance(err, ValidationError) else str(err)
            bad.append(MalformedRow(values["id"], {name: values[name] for name in KEY_COLUMNS},
                                    f"malformed row: {reason}"))
    return good, bad

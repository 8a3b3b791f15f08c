"""Winners read from a SQLite file with the standard library's sqlite3, so that an op call's first
lookup imports no SQLAlchemy (whose import alone costs most of a cold start).

It serves only a regular file at the current schema revision, read-only, with the query and the
row conversion of ``TuningStore.nearest_winners``. Anything else (not a regular file, no record of
the revision or another one, an error of sqlite3, a stored time that does not parse) raises
``NotServed``: the caller then reads through ``TuningStore``, which says what is wrong.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from tileops.db.key import TuningKey
from tileops.db.location import READ_BUSY_TIMEOUT_S, file_uri
from tileops.db.nearest import nearest_winners
from tileops.db.rows import MalformedRow
from tileops.db.schemas import WinnerRecord
from tileops.db.tables import HEAD_REVISION, WINNER_COLUMNS


class NotServed(Exception):
    """This reader does not serve the file; ``TuningStore`` is to read it and say why."""


def stored_time(value: Optional[str]) -> Optional[datetime]:
    """A time as SQLite holds it (ISO text of the UTC instant) read back zone-aware, as the
    models' ``UtcDateTime`` reads it."""
    return None if value is None else datetime.fromisoformat(value).replace(tzinfo=timezone.utc)


class SqliteReader:
    """The winners of the SQLite file at ``path``, opened read-only; ``NotServed`` unless the file
    is a regular one at schema revision ``HEAD_REVISION``."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise NotServed(f"{path} is not a regular file")
        self._connection: Optional[sqlite3.Connection] = None
        try:
            self._connection = sqlite3.connect(f"{file_uri(str(path))}?mode=ro", uri=True,
                                               timeout=READ_BUSY_TIMEOUT_S, isolation_level=None,
                                               check_same_thread=False)
            self._connection.execute("PRAGMA query_only = ON")
            revisions = self._connection.execute("SELECT version_num FROM alembic_version").fetchall()
        except sqlite3.Error as err:
            self.close()
            raise NotServed(f"{path}: {err}") from err
        if revisions != [(HEAD_REVISION,)]:
            self.close()
            raise NotServed(f"{path} is at schema revision {revisions}, not {HEAD_REVISION}")

    def nearest_winners(self, key: TuningKey, limit: int) -> tuple[list[WinnerRecord], list[MalformedRow]]:
        """What ``TuningStore.nearest_winners`` returns for the same file."""
        try:
            return nearest_winners(self._rows, key, limit)
        except (sqlite3.Error, ValueError, TypeError) as err:
            self.close()
            raise NotServed(str(err)) from err

    def _rows(self, sql: str, params: dict) -> list[dict[str, Any]]:
        rows = [dict(zip(WINNER_COLUMNS, row)) for row in self._connection.execute(sql, params)]
        for row in rows:
            row["created_at"] = stored_time(row["created_at"])
        return rows

    def close(self) -> None:
        """Release the connection."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

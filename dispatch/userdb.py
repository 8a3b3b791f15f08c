"""Read-only access to the user's tuning database that never breaks or stalls an op call.

A missing database is simply empty. One that cannot serve (corrupted, locked, unreadable,
outdated, not a regular file, a malformed URL, a server that does not answer) is reported once
as a ``TuningDatabaseWarning`` and then treated as empty, so dispatch falls back to the shipped
snapshot and the defaults. No read waits longer than ``DEADLINE_S``, whatever the backend.

A SQLite file named by a path (not a URL) at the current schema revision is read with sqlite3
(``tileops.db.sqlite_reader``), so that an op call imports no SQLAlchemy; anything else about it,
and any other database, is read through ``TuningStore``, which also says what is wrong.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Callable, Optional, TypeVar

from tileops.db.key import TuningKey
from tileops.db.location import READ_BUSY_TIMEOUT_S, located
from tileops.db.schemas import WinnerRecord
from tileops.db.sqlite_reader import NotServed, SqliteReader
from tileops.errors import TuningDatabaseWarning, TuningRowWarning

T = TypeVar("T")

# The longest an op call waits on the database; a read still running then is abandoned.
DEADLINE_S = READ_BUSY_TIMEOUT_S
# How many of a family's rows a lookup reads: the key's own, then the nearest buckets and devices.
NEAREST_ROWS = 32


class DatabaseTimeout(Exception):
    """The database did not answer within the deadline."""


def within_deadline(work: Callable[[], T], deadline_s: float = DEADLINE_S) -> T:
    """``work()``, or ``DatabaseTimeout`` once ``deadline_s`` has passed without an answer.

    The work runs in a daemon thread: a driver blocked on a silent socket cannot be interrupted,
    so it is left behind (the database is then marked broken and never asked again).
    """
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as err:  # handed to the caller's thread as it is
            outcome["error"] = err

    thread = threading.Thread(target=run, name="tileops-db-read", daemon=True)
    thread.start()
    thread.join(deadline_s)
    if thread.is_alive():
        raise DatabaseTimeout(f"no answer within {deadline_s:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


class UserDatabase:
    """The winners table of ``$TILEOPS_DB`` (or the default path), opened lazily, read-only."""

    def __init__(self, url: Optional[str] = None) -> None:
        self._requested = url
        self.url: Optional[str] = None
        self._path: Optional[Path] = None  # the SQLite file, when named by a path
        self._reader: Optional[SqliteReader] = None
        self._store = None
        self._broken = False

    def nearest(self, key: TuningKey) -> list[WinnerRecord]:
        """The key's own winner and its family's nearest (``NEAREST_ROWS`` at most, by bucket
        distance: this device's, else other devices'); [] when the database cannot serve. A
        malformed row is passed over with a ``TuningRowWarning``; the others still serve."""
        good, bad = self._ask(lambda source: source.nearest_winners(key, NEAREST_ROWS), ([], []), light=True)
        for row in bad:
            warnings.warn(f"tuning row {row.id} of {self._shown()} passed over ({row.reason}); "
                          "tileops-db prune removes it", TuningRowWarning, stacklevel=3)
        return good

    def winners(self, **filters: object) -> list[WinnerRecord]:
        """Winners matching the key columns in ``filters``; [] when the database cannot serve."""
        return self._ask(lambda store: store.winners(**filters), [])

    def _ask(self, read: Callable, empty: T, light: bool = False) -> T:
        """``read(source)`` within the deadline, or ``empty`` (warning once) when the database
        cannot serve. ``light``: the source may be the sqlite3 reader, else it is the store."""
        if self._broken:
            return empty
        try:
            if self.url is None:
                self.url, self._path = located(self._requested)
            if self._missing():
                return empty
            return within_deadline(lambda: self._read(read, light))
        except Exception as err:  # any database fault must leave the op call working
            self._broken = True
            warnings.warn(f"tuning database {self._shown()} cannot be read ({type(err).__name__}: {err}); "
                          "using the shipped snapshot and default configs", TuningDatabaseWarning, stacklevel=4)
            return empty

    def _missing(self) -> bool:
        """Whether the database is a SQLite file that does not exist yet: an empty one."""
        if self._path is not None:
            return not self._path.exists()
        from tileops.db.engine import sqlite_path

        path = sqlite_path(self.url)
        return path is not None and not path.exists()

    def _shown(self) -> str:
        """The database's name as it may be printed (no password), even when it does not parse."""
        try:
            url, path = (self.url, self._path) if self.url is not None else located(self._requested)
            if path is not None:
                return url
            from tileops.db.engine import display_url

            return display_url(url)
        except Exception:  # a URL that does not parse is shown by where it came from
            return "named by --db or $TILEOPS_DB (malformed)"

    def _read(self, read: Callable[[object], T], light: bool) -> T:
        """``read(source)`` from the sqlite3 reader where it serves, else from the store."""
        if light and self._path is not None and self._store is None:
            try:
                if self._reader is None:
                    self._reader = SqliteReader(self._path)
                return read(self._reader)
            except NotServed:
                self._reader = None
        return read(self._open())

    def _open(self):
        if self._store is None:
            from tileops.db.store import TuningStore

            self._store = TuningStore(self.url, readonly=True)
        return self._store

"""Read-only access to the user's tuning database that never breaks an op call.

A missing database is simply empty. A corrupted, locked, unreadable or outdated one is reported
once as a warning and then treated as empty, so dispatch falls back to the shipped snapshot and
the defaults.
"""

from __future__ import annotations

import warnings
from typing import Optional

from tileops.db.engine import resolve_url, sqlite_path
from tileops.db.schemas import WinnerRecord


class UserDatabase:
    """The winners table of ``$TILEOPS_DB`` (or the default path), opened lazily, read-only."""

    def __init__(self, url: Optional[str] = None) -> None:
        self.url = resolve_url(url)
        self._store = None
        self._broken = False

    def winners(self, **filters: object) -> list[WinnerRecord]:
        """Winners matching the key columns in ``filters``; [] when the database cannot serve."""
        if self._broken:
            return []
        path = sqlite_path(self.url)
        if path is not None and not path.exists():
            return []
        try:
            if self._store is None:
                from tileops.db.store import TuningStore

                self._store = TuningStore(self.url, readonly=True)
            return self._store.winners(**filters)
        except Exception as err:  # any database fault must leave the op call working
            self._broken = True
            warnings.warn(f"tuning database {self.url} cannot be read ({type(err).__name__}: {err}); "
                          "using the shipped snapshot and default configs", RuntimeWarning, stacklevel=3)
            return []

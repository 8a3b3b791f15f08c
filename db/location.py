"""Where the tuning database is, and how long its SQLite file's users wait for a lock, decided
without SQLAlchemy: the engine and dispatch's sqlite3 reader both start here.

A value containing ``://`` is a SQLAlchemy URL; anything else is a path to a SQLite file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional
from urllib.parse import quote

DEFAULT_PATH = Path("~/.cache/tileops/tuning.db")
# A writer (the tuner) waits as long as other writers need; a reader (dispatch, on an op call's
# first lookup) waits briefly and then falls back.
BUSY_TIMEOUT_S = 30.0
READ_BUSY_TIMEOUT_S = 2.0


def requested(db: Optional[str] = None) -> str:
    """The database as named: ``db``, else $TILEOPS_DB, else ``~/.cache/tileops/tuning.db``."""
    return db or os.environ.get("TILEOPS_DB") or str(DEFAULT_PATH)


def file_path(value: str) -> Optional[Path]:
    """The SQLite file a value names as a path, made absolute; None for a URL."""
    return None if "://" in value else Path(value).expanduser().absolute()


def located(db: Optional[str] = None) -> tuple[str, Optional[Path]]:
    """The database's URL (a path made a SQLite URL) and, when named by a path, its file."""
    value = requested(db)
    path = file_path(value)
    return (value, None) if path is None else (sqlite_url(path), path)


def sqlite_url(path: Path) -> str:
    """The URL of a SQLite file, as SQLAlchemy writes it (``?``, ``#`` and ``%`` escaped). It
    holds no password, so it is also how the file is shown."""
    return "sqlite:///" + quote(str(path), safe=" +/")


def file_uri(path: str) -> str:
    """SQLite's ``file:`` URI of a path (characters that URIs reserve escaped), for opening with
    query parameters such as ``mode=ro``."""
    return f"file:{quote(path)}"

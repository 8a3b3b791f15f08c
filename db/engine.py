"""Where the tuning database is and how to connect to it.

A database is named by a SQLAlchemy URL or by a filesystem path (a SQLite file). SQLite is tuned
for many tuning processes sharing one file: WAL journal (readers never block the writer), a busy
timeout (writers wait for one another instead of failing) and write transactions that take the
write lock when they begin, so that the wait happens there and not half-way through.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

DEFAULT_PATH = Path("~/.cache/tileops/tuning.db")
BUSY_TIMEOUT_S = 30.0
READ_BUSY_TIMEOUT_S = 2.0

# Backends named without a driver, and the driver that serves them: psycopg 3 and PyMySQL.
_DEFAULT_DRIVERS = {"postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg",
                    "mysql": "mysql+pymysql", "mariadb": "mariadb+pymysql"}

# How a server session is made read-only, per backend: its transactions refuse to write.
_READ_ONLY_CONNECT_ARGS = {
    "postgresql": {"options": "-c default_transaction_read_only=on"},
    "mysql": {"init_command": "SET SESSION TRANSACTION READ ONLY"},
    "mariadb": {"init_command": "SET SESSION TRANSACTION READ ONLY"},
}


def resolve_url(db: Optional[str] = None) -> str:
    """The database URL: ``db``, else $TILEOPS_DB, else ``~/.cache/tileops/tuning.db``.

    A value containing ``://`` is a SQLAlchemy URL and is returned as given; anything else is a
    path to a SQLite file, made absolute (its parent folders are created).
    """
    value = db or os.environ.get("TILEOPS_DB") or str(DEFAULT_PATH)
    if "://" in value:
        return value
    path = Path(value).expanduser().absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    return sqlite_url(path)


def sqlite_url(path: Path) -> str:
    """The URL of a SQLite file (characters such as ``?`` and ``#`` escaped)."""
    return URL.create("sqlite", database=str(path)).render_as_string()


def driver_url(url: str) -> URL:
    """The URL with an explicit driver: a bare ``postgresql://`` uses psycopg 3, a bare
    ``mysql://`` or ``mariadb://`` PyMySQL."""
    parsed = make_url(url)
    return parsed.set(drivername=_DEFAULT_DRIVERS.get(parsed.drivername, parsed.drivername))


def sqlite_path(url: str) -> Optional[Path]:
    """The file behind a SQLite URL, or None for an in-memory database or another backend."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def display_url(url: str) -> str:
    """The URL as it may be printed: any password is masked."""
    return make_url(url).render_as_string(hide_password=True)


def make_engine(url: str, *, readonly: bool = False) -> Engine:
    """An engine for ``url``: SQLite gets WAL, a busy timeout and foreign keys; a server's pooled
    connections are checked before use (servers drop idle ones).

    ``readonly`` opens SQLite through a ``mode=ro`` URI (the file is never created or written)
    and PostgreSQL, MySQL and MariaDB with read-only transactions. Other backends are passed
    through as given.
    """
    parsed = driver_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(parsed, readonly=readonly)
    connect_args = _READ_ONLY_CONNECT_ARGS.get(backend, {}) if readonly else {}
    return create_engine(parsed, connect_args=connect_args, pool_pre_ping=True)


def _sqlite_engine(url: URL, *, readonly: bool) -> Engine:
    if readonly and url.database not in (None, "", ":memory:"):
        url = url.set(database=f"file:{quote(url.database)}", query={"mode": "ro", "uri": "true"})
    # A reader (dispatch, on an op call's first lookup) waits briefly and then falls back; a
    # writer (the tuner) waits as long as other writers need.
    busy_s = READ_BUSY_TIMEOUT_S if readonly else BUSY_TIMEOUT_S
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": busy_s})

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection, _record) -> None:
        # Take over transaction control from the sqlite3 module, so that "begin" below decides.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_s * 1000)}")
        cursor.execute("PRAGMA foreign_keys = ON")
        if readonly:
            cursor.execute("PRAGMA query_only = ON")
        else:
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection) -> None:
        connection.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")

    return engine

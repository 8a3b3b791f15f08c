"""Where the tuning database is and how to connect to it.

A database is named by a SQLAlchemy URL or by a filesystem path (a SQLite file). SQLite is tuned
for many tuning processes sharing one file: WAL journal (readers never block the writer), a busy
timeout (writers wait for one another instead of failing) and write transactions that take the
write lock when they begin, so that the wait happens there and not half-way through.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from tileops.db.errors import DatabaseUnreadable
from tileops.db.location import BUSY_TIMEOUT_S, READ_BUSY_TIMEOUT_S, file_uri, located

# A server that accepts a connection and never answers must not hang the caller: connecting
# (handshake included) gives up after this long, and so does a reader's wait for one reply.
CONNECT_TIMEOUT_S = 2
READ_TIMEOUT_S = 2
WRITE_TIMEOUT_S = 120

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
    path to a SQLite file, made absolute. Nothing is created here: a writer's engine creates the
    folders (``make_engine``), so that a reader never fails on a folder it cannot make.
    """
    return located(db)[0]


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
    and PostgreSQL, MySQL and MariaDB with read-only transactions. A writer's SQLite file gets its
    folders created. Servers get connect timeouts (and MySQL and MariaDB read timeouts: short for
    a reader, long for a writer that may wait for locks). Other backends are passed through.

    Raises ``DatabaseUnreadable`` for a SQLite path that exists but is not a regular file (a FIFO
    would block forever) and for a URL that does not parse (a malformed port).
    """
    try:
        parsed = driver_url(url)
        backend = parsed.get_backend_name()
    except (ValueError, ArgumentError) as err:
        raise DatabaseUnreadable(f"the tuning database URL is malformed ({err}); "
                                 "expected e.g. postgresql://user@host:5432/db or a file path") from None
    if backend == "sqlite":
        return _sqlite_engine(parsed, readonly=readonly)
    connect_args = dict(_READ_ONLY_CONNECT_ARGS.get(backend, {}) if readonly else {})
    connect_args.update(_timeouts(backend, readonly))
    return create_engine(parsed, connect_args=connect_args, pool_pre_ping=True)


def _timeouts(backend: str, readonly: bool) -> dict:
    """The driver's connect (and, where it has one, read and write) timeouts for ``backend``."""
    if backend == "postgresql":
        return {"connect_timeout": CONNECT_TIMEOUT_S}
    if backend in ("mysql", "mariadb"):
        wait_s = READ_TIMEOUT_S if readonly else WRITE_TIMEOUT_S
        return {"connect_timeout": CONNECT_TIMEOUT_S, "read_timeout": wait_s, "write_timeout": wait_s}
    return {}


def check_regular_file(path: Path) -> None:
    """Refuse a SQLite path that exists but is not a regular file: a FIFO or a device would block
    or mislead the connection, a folder cannot be a database."""
    if path.exists() and not path.is_file():
        raise DatabaseUnreadable(f"tuning database path {path} is not a regular file; "
                                 "point --db or $TILEOPS_DB at a SQLite file")


def _sqlite_engine(url: URL, *, readonly: bool) -> Engine:
    if url.database not in (None, "", ":memory:") and not url.database.startswith("file:"):
        path = Path(url.database)
        check_regular_file(path)
        if not readonly:
            _make_folder(path.parent)
    if readonly and url.database not in (None, "", ":memory:"):
        url = url.set(database=file_uri(url.database), query={"mode": "ro", "uri": "true"})
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


def _make_folder(folder: Path) -> None:
    """The folders of a database file a writer is about to create, with an error saying why not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DatabaseUnreadable(f"cannot create the folder {folder} of the tuning database "
                                 f"({err.strerror or err}); point --db or $TILEOPS_DB elsewhere") from None

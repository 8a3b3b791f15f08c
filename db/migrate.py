"""Schema revisions: move a database up or down, and refuse one at another revision.

A brand-new database (no tables at all) is given the schema when opened for writing, so that a
first tuning run just works. An existing database at an older revision is never migrated behind
the user's back: opening it raises ``SchemaOutOfDate`` naming the command that migrates it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator, Optional

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

from tileops.db.engine import display_url, make_engine
from tileops.db.errors import SchemaOutOfDate, StoreError

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

# Migrating processes take turns through a lock of the server: on PostgreSQL an advisory lock of
# this key (any constant shared by all), on MySQL and MariaDB a lock named after the database.
_POSTGRES_LOCK_KEY = 0x7469_6C65
_MYSQL_LOCK_NAME = "CONCAT('tileops-migrate:', DATABASE())"
_MYSQL_LOCK_WAIT_S = 600
_MYSQL = ("mysql", "mariadb")


def alembic_config(url: str) -> Config:
    """An Alembic Config for ``url`` that needs no alembic.ini (works from an installed package)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # ConfigParser interpolation: a literal % (URL-escaped passwords) must be doubled.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def take_migration_lock(connection: Connection) -> None:
    """Wait for, and take, the turn to migrate the database.

    PostgreSQL's lock ends with the transaction. MySQL's DDL commits at once, so its lock is the
    session's: it goes when the connection does. SQLite needs none: the engine begins write
    transactions with BEGIN IMMEDIATE.
    """
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _POSTGRES_LOCK_KEY})
    elif connection.dialect.name in _MYSQL:
        taken = connection.execute(text(f"SELECT GET_LOCK({_MYSQL_LOCK_NAME}, :wait_s)"),
                                   {"wait_s": _MYSQL_LOCK_WAIT_S}).scalar()
        if taken != 1:
            raise StoreError(f"another process has been migrating the database for {_MYSQL_LOCK_WAIT_S} s")


@contextlib.contextmanager
def migration_turn(engine: Engine) -> Iterator[None]:
    """Hold the turn to migrate while the body runs, so that no other process migrates meanwhile.

    MySQL and MariaDB show a migration's tables as they are made, so a schema still being made
    must not be judged; elsewhere a migration is one transaction, seen whole or not at all, and
    no turn is needed to judge it.
    """
    if engine.dialect.name not in _MYSQL:
        yield
        return
    with engine.connect() as connection:
        take_migration_lock(connection)
        try:
            yield
        finally:
            connection.execute(text(f"SELECT RELEASE_LOCK({_MYSQL_LOCK_NAME})"))


def wait_for_migration(engine: Engine) -> None:
    """Return once no other process is migrating the database."""
    with migration_turn(engine):
        pass


# The tables of every revision, and the column each later revision adds to them: what dates a
# database whose tables were made without Alembic's record of the revision (newest first).
TABLES = ("tuning_runs", "trials", "winners")
REVISION_MARKERS = (("0002", "tuning_runs", "heartbeat_at"),)


def unrecorded_revision(engine: Engine, shown: str) -> Optional[str]:
    """The revision of tileops tables that have no ``alembic_version`` beside them, or None when
    there are none. ``StoreError`` when only some of them are there: no revision made those."""
    inspector = inspect(engine)
    present = set(TABLES) & set(inspector.get_table_names())
    if not present:
        return None
    missing = sorted(set(TABLES) - present)
    if missing:
        raise StoreError(
            f"{shown} has the tileops tables {', '.join(sorted(present))} but not {', '.join(missing)}, and no "
            "record of its schema revision (no alembic_version table): no tileops schema looks like that; "
            "drop or rename those tables, or use another database")
    for revision, table, column in REVISION_MARKERS:
        if column in {c["name"] for c in inspector.get_columns(table)}:
            return revision
    return "0001"


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` up to ``revision``. Tileops tables without a recorded
    revision are first dated by their columns and that revision recorded (stamped)."""
    config = alembic_config(url)
    engine = make_engine(url)
    try:
        with migration_turn(engine):  # judged whole: another process may be making the tables
            found = None if current_revision(engine) else unrecorded_revision(engine, display_url(url))
    finally:
        engine.dispose()
    if found:
        command.stamp(config, found)
    command.upgrade(config, revision)


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at ``url`` down to ``revision`` (``base`` drops every table)."""
    command.downgrade(alembic_config(url), revision)


def head_revision() -> str:
    """The newest revision this code knows."""
    return ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()


def current_revision(engine: Engine) -> Optional[str]:
    """The revision the database is at, or None when it has never been migrated."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def require_current(engine: Engine, url: Optional[str] = None) -> None:
    """Raise ``SchemaOutOfDate`` unless the database is at the head revision.

    ``url`` is the name to print in the message (default: the engine's URL).
    """
    current, head = current_revision(engine), head_revision()
    if current == head:
        return
    shown = display_url(url) if url else engine.url.render_as_string(hide_password=True)
    if current is None:
        if unrecorded_revision(engine, shown) is None:
            raise SchemaOutOfDate(
                f"{shown} has no tileops tables; create them with: tileops-db upgrade --db {shown}")
        raise SchemaOutOfDate(
            f"{shown} has tileops tables but no record of their schema revision (no alembic_version table); "
            f"record it and migrate with: tileops-db upgrade --db {shown}")
    known = {script.revision for script in ScriptDirectory(str(MIGRATIONS_DIR)).walk_revisions()}
    if current not in known:
        raise SchemaOutOfDate(
            f"{shown} is at schema revision {current}, which this tileops does not know (its newest "
            f"is {head}): it was written by a newer tileops; upgrade tileops or use another database")
    raise SchemaOutOfDate(
        f"{shown} is at schema revision {current}, this tileops needs {head}; "
        f"migrate it with: tileops-db upgrade --db {shown}")


def ensure_current(engine: Engine, url: str) -> None:
    """Give a brand-new database (no tables at all) the schema; require any other to be current."""
    if not inspect(engine).get_table_names():
        upgrade(url)
    wait_for_migration(engine)
    require_current(engine, url)

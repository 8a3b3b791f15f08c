"""Alembic migrations up and down (SQLite, PostgreSQL and MariaDB), the models matching them, and
the refusal to use a database at another schema revision."""

import io
import os
import subprocess
import sys

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from tests.support.db import REPO
from sqlalchemy import inspect, text
from sqlalchemy.schema import CreateTable

from tileops.db import migrate
from tileops.db.engine import driver_url, make_engine
from tileops.db.errors import DatabaseUnreadable, SchemaOutOfDate, StoreError
from tileops.db.models import Base
from tileops.db.store import TuningStore

TABLES = {"tuning_runs", "trials", "winners"}


def tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_creates_the_schema_and_downgrade_removes_it(db_url):
    migrate.upgrade(db_url)
    assert tables(db_url) == TABLES
    engine = make_engine(db_url)
    assert migrate.current_revision(engine) == migrate.head_revision() == "0002"
    migrate.downgrade(db_url, "0001")
    assert "heartbeat_at" not in {c["name"] for c in inspect(engine).get_columns("tuning_runs")}
    migrate.downgrade(db_url, "base")
    assert tables(db_url) == set()
    assert migrate.current_revision(engine) is None
    migrate.upgrade(db_url)
    assert tables(db_url) == TABLES
    engine.dispose()


def test_the_models_match_the_migrations(db_url):
    migrate.upgrade(db_url)
    engine = make_engine(db_url)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    engine.dispose()
    assert differences == []


def table_columns(ddl: str) -> dict[str, set[str]]:
    """The lines of each CREATE TABLE in ``ddl`` (columns and constraints), by table name, with
    the columns that later ALTER TABLE ... ADD COLUMN statements add."""
    code = "\n".join(line for line in ddl.splitlines() if not line.startswith("--"))
    statements = [s.strip() for s in code.split(";")]
    tables = {s.split()[2]: {line.strip().rstrip(",") for line in s.splitlines()[1:-1]}
              for s in statements if s.startswith("CREATE TABLE")}
    for s in statements:
        words = s.split()
        if words[:2] == ["ALTER", "TABLE"] and words[3:5] == ["ADD", "COLUMN"]:
            tables[words[2]].add(" ".join(words[5:]).removesuffix(" NULL"))
    return tables


@pytest.mark.parametrize("url", ["sqlite:///tuning.db", "postgresql://u@h/db", "mysql://u@h/db"])
def test_the_models_and_the_migrations_write_the_same_tables(url):
    """As each dialect's DDL, which also shows what compare_metadata overlooks (MySQL's character
    sets, collations and fractional seconds)."""
    config = migrate.alembic_config(url)
    config.output_buffer = io.StringIO()
    command.upgrade(config, "head", sql=True)  # offline: prints the SQL, needs no server
    migrated = table_columns(config.output_buffer.getvalue())
    migrated.pop("alembic_version")
    dialect = driver_url(url).get_dialect()()
    modelled = table_columns(";".join(str(CreateTable(table).compile(dialect=dialect))
                                      for table in Base.metadata.sorted_tables))
    assert migrated == modelled


def test_a_new_database_opened_for_writing_gets_the_schema(tmp_path):
    for path in (tmp_path / "missing.db", tmp_path / "empty.db"):
        if path.name == "empty.db":
            path.touch()
        with TuningStore(str(path)) as store:
            assert migrate.current_revision(store.engine) == migrate.head_revision()
        assert tables(f"sqlite:///{path}") == TABLES


def test_an_empty_server_database_opened_for_writing_gets_the_schema(server_url):
    with TuningStore(server_url) as store:
        assert migrate.current_revision(store.engine) == migrate.head_revision()


def test_an_empty_database_is_not_created_for_reading(tmp_path):
    path = tmp_path / "missing.db"
    with pytest.raises(DatabaseUnreadable, match="tileops-db upgrade --db"):
        TuningStore(str(path), readonly=True)
    assert not path.exists()


@pytest.mark.parametrize("readonly", [False, True])
def test_an_existing_database_without_the_schema_is_never_migrated_silently(db_url, readonly):
    migrate.upgrade(db_url)
    migrate.downgrade(db_url, "base")  # leaves alembic's bookkeeping table: not a new database
    with pytest.raises(SchemaOutOfDate, match=r"no tileops tables; create them with: tileops-db upgrade --db "):
        TuningStore(db_url, readonly=readonly)
    assert tables(db_url) == set()


def test_an_older_revision_names_the_command_that_migrates_it(sqlite_url):
    migrate.upgrade(sqlite_url, "0001")
    with pytest.raises(SchemaOutOfDate) as raised:
        TuningStore(sqlite_url)
    message = str(raised.value)
    assert "at schema revision 0001, this tileops needs 0002" in message
    assert f"tileops-db upgrade --db {sqlite_url}" in message


def test_a_revision_from_a_newer_tileops_says_so(sqlite_url):
    migrate.upgrade(sqlite_url)
    engine = make_engine(sqlite_url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = 'f00d'"))
    engine.dispose()
    with pytest.raises(SchemaOutOfDate, match="newer tileops"):
        TuningStore(sqlite_url, readonly=True)


def test_the_alembic_command_line_works_from_the_repository_root(tmp_path):
    path = tmp_path / "cli.db"
    env = dict(os.environ, TILEOPS_DB=str(tmp_path / "other.db"))
    run = lambda *args: subprocess.run([sys.executable, "-m", "alembic", "-c", "alembic.ini", *args],  # noqa: E731
                                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    up = run("-x", f"url={path}", "upgrade", "head")
    assert up.returncode == 0, up.stderr
    assert tables(f"sqlite:///{path}") == TABLES
    assert not (tmp_path / "other.db").exists()
    down = run("-x", f"url={path}", "downgrade", "base")
    assert down.returncode == 0, down.stderr
    assert tables(f"sqlite:///{path}") == set()
    from_env = run("upgrade", "head")  # no -x url: $TILEOPS_DB
    assert from_env.returncode == 0, from_env.stderr
    assert tables(f"sqlite:///{tmp_path / 'other.db'}") == TABLES


def drop_alembic_record(url: str) -> None:
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("DROP TABLE alembic_version"))
    engine.dispose()


@pytest.mark.parametrize("made_at", ["0001", "head"])
def test_tables_without_a_recorded_revision_are_dated_stamped_and_migrated(db_url, made_at):
    migrate.upgrade(db_url, made_at)
    engine = make_engine(db_url)
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO tuning_runs (started_at, arch, device_name, host, versions, status) "
                                "VALUES ('2026-01-01 00:00:00', 'cpu', 'cpu', 'h', '{}', 'ok')"))
    drop_alembic_record(db_url)
    with pytest.raises(SchemaOutOfDate, match=r"has tileops tables but no record of their schema revision .*"
                                              r"record it and migrate with: tileops-db upgrade --db "):
        TuningStore(db_url)
    migrate.upgrade(db_url)
    assert migrate.current_revision(engine) == migrate.head_revision()
    assert "heartbeat_at" in {c["name"] for c in inspect(engine).get_columns("tuning_runs")}
    engine.dispose()
    with TuningStore(db_url) as store:
        assert [run.arch for run in store.runs()] == ["cpu"]


def test_the_upgrade_command_the_message_names_works(tmp_path):
    path = tmp_path / "made_elsewhere.db"
    engine = make_engine(f"sqlite:///{path}")
    Base.metadata.create_all(engine)  # the schema, without Alembic's record of it
    engine.dispose()
    with pytest.raises(SchemaOutOfDate) as raised:
        TuningStore(str(path))
    command_line = str(raised.value).rsplit(": ", 1)[1].split()
    assert command_line[:2] == ["tileops-db", "upgrade"]
    done = subprocess.run([sys.executable, "-m", "tileops.cli.db", *command_line[1:]], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    with TuningStore(str(path)) as store:
        assert migrate.current_revision(store.engine) == migrate.head_revision()


def test_some_tileops_tables_without_a_recorded_revision_are_refused_in_words(sqlite_url):
    migrate.upgrade(sqlite_url)
    engine = make_engine(sqlite_url)
    with engine.begin() as connection:
        connection.execute(text("DROP TABLE winners"))
        connection.execute(text("DROP TABLE alembic_version"))
    engine.dispose()
    with pytest.raises(StoreError, match="has the tileops tables trials, tuning_runs but not winners"):
        migrate.upgrade(sqlite_url)

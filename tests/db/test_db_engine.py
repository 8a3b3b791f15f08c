"""Where the database is (resolve_url) and how SQLite connections are set up (make_engine)."""

import os
from pathlib import Path

import pytest
from sqlalchemy import text

from tileops.db import engine as engine_module
from tileops.db.engine import driver_url, make_engine, resolve_url
from tileops.db.errors import DatabaseUnreadable


def test_a_path_becomes_an_absolute_sqlite_url_and_only_a_writer_creates_its_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = resolve_url("nested/dir/tuning.db")
    assert url == f"sqlite:///{tmp_path}/nested/dir/tuning.db"
    assert not (tmp_path / "nested").exists()
    make_engine(url, readonly=True).dispose()
    assert not (tmp_path / "nested").exists()
    make_engine(url).dispose()
    assert (tmp_path / "nested" / "dir").is_dir()
    assert not (tmp_path / "nested" / "dir" / "tuning.db").exists()


def test_a_folder_that_cannot_be_made_is_one_clear_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(DatabaseUnreadable, match=f"cannot create the folder {tmp_path}/file/sub"):
        make_engine(resolve_url(str(tmp_path / "file" / "sub" / "tuning.db")))


def test_a_path_that_is_not_a_regular_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / "fifo.db")
    for readonly in (True, False):
        with pytest.raises(DatabaseUnreadable, match="is not a regular file"):
            make_engine(resolve_url(str(tmp_path / "fifo.db")), readonly=readonly)


def test_a_malformed_url_is_one_clear_error_without_the_url():
    with pytest.raises(DatabaseUnreadable, match="URL is malformed") as raised:
        make_engine("postgresql://user:secret@host:port/db")
    assert "secret" not in str(raised.value)


@pytest.mark.parametrize("url, readonly, expected", [
    ("postgresql://u@h/db", True, {"connect_timeout": 2}),
    ("mysql://u@h/db", True, {"connect_timeout": 2, "read_timeout": 2, "write_timeout": 2}),
    ("mariadb://u@h/db", False, {"connect_timeout": 2, "read_timeout": 120, "write_timeout": 120}),
])
def test_servers_get_connect_and_read_timeouts(url, readonly, expected, monkeypatch):
    seen = {}
    monkeypatch.setattr(engine_module, "create_engine", lambda url, connect_args, **kw: seen.update(connect_args))
    make_engine(url, readonly=readonly)
    assert expected.items() <= seen.items()


def test_the_argument_wins_then_the_environment_then_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("TILEOPS_DB", raising=False)
    assert resolve_url() == f"sqlite:///{tmp_path}/.cache/tileops/tuning.db"
    monkeypatch.setenv("TILEOPS_DB", "postgresql://u@h/db")
    assert resolve_url() == "postgresql://u@h/db"
    assert resolve_url("sqlite:///x.db") == "sqlite:///x.db"


def test_bare_postgresql_urls_use_psycopg_3():
    assert driver_url("postgresql://u@h:5432/db").drivername == "postgresql+psycopg"
    assert driver_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert driver_url("postgresql+psycopg2://u@h/db").drivername == "postgresql+psycopg2"


def test_bare_mysql_and_mariadb_urls_use_pymysql():
    assert driver_url("mysql://u@h:3306/db").drivername == "mysql+pymysql"
    assert driver_url("mariadb://u@h/db").drivername == "mariadb+pymysql"
    assert driver_url("mysql+mysqldb://u@h/db").drivername == "mysql+mysqldb"


def test_sqlite_connections_use_wal_a_busy_timeout_and_foreign_keys(tmp_path):
    engine = make_engine(resolve_url(str(tmp_path / "t.db")))
    with engine.connect() as connection:
        pragma = lambda name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()  # noqa: E731
        assert pragma("journal_mode") == "wal"
        assert pragma("busy_timeout") == 30000
        assert pragma("foreign_keys") == 1
    engine.dispose()


def test_a_readonly_engine_never_creates_the_file(tmp_path):
    path = tmp_path / "absent.db"
    engine = make_engine(resolve_url(str(path)), readonly=True)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception:
        pass  # refusing to open is right; creating the file is not
    engine.dispose()
    assert not path.exists()


def test_readonly_sqlite_handles_paths_that_need_escaping(tmp_path):
    path = tmp_path / "a dir #1" / "t?.db"
    url = resolve_url(str(path))
    writer = make_engine(url)
    with writer.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE t (x INTEGER)")
        connection.exec_driver_sql("INSERT INTO t VALUES (7)")
    writer.dispose()
    reader = make_engine(url, readonly=True)
    with reader.connect() as connection:
        assert connection.exec_driver_sql("SELECT x FROM t").scalar() == 7
    reader.dispose()
    assert sorted(p.name for p in Path(path.parent).iterdir() if not p.name.endswith(("-wal", "-shm"))) == ["t?.db"]

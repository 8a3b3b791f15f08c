"""Dispatch: the config chain (user DB → shipped snapshot → nearest bucket → default), stale and
invalid rows, the in-memory cache, database faults that never break an op call, and no writes."""

from __future__ import annotations

import hashlib
from dataclasses import asdict
import sqlite3
import warnings

import pytest
import torch

from tileops import dispatch
from tileops.errors import TuningDatabaseWarning, TuningRowWarning
from tileops.db.migrate import upgrade
from tileops.db.schemas import WinnerRecord
from tileops.db.store import TuningStore
from tileops.dispatch import snapshot
from tileops.dispatch.userdb import UserDatabase
from tileops.kernels.registry import get_kernel
from tileops.cases import Case
from tileops.tuner.cases import make_inputs, make_op

KERNEL = "reference.gdn_chunk"
CASE = Case("gdn", 1, 300, 1, 2, 16, "float32")


def call(case=CASE, seed=0):
    return make_op(case), make_inputs(case, seed)


def spec_of(case=CASE):
    op, args = call(case)
    return op.describe(*args)[0]


def winner(case=CASE, **fields) -> WinnerRecord:
    """A winner row for ``case`` served by the reference GDN chunk kernel."""
    from tileops.dispatch.key import key_for

    key = key_for(KERNEL, spec_of(case))
    values = asdict(key)
    values.update(config={"chunk_size": 32, "solve": "substitution"}, time_ms=1.0, default_ms=2.0, speedup=2.0,
                  source_hash=get_kernel(KERNEL).source_hash, source="tuned", call=case.to_json())
    values.update(fields)
    return WinnerRecord(**values)


@pytest.fixture
def user_db(tmp_path, monkeypatch):
    """An empty, current tuning database named by $TILEOPS_DB."""
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    upgrade(url)
    monkeypatch.setenv("TILEOPS_DB", url)
    dispatch.reset()
    yield url
    dispatch.reset()


@pytest.fixture
def snapshot_rows(monkeypatch):
    """Replace the shipped snapshot with rows the test chooses."""
    rows: list[WinnerRecord] = []
    monkeypatch.setattr(snapshot, "shipped_winners", lambda arch: tuple(r for r in rows if r.arch == arch))
    return rows


def explain(case=CASE):
    op, args = call(case)
    return dispatch.explain(op, *args)


def test_default_when_nothing_is_stored(user_db, snapshot_rows):
    e = explain()
    assert e.kernel == KERNEL and e.source == "default"
    assert e.config == get_kernel(KERNEL).default(spec_of()).model_dump()


def test_user_row_wins_over_the_snapshot(user_db, snapshot_rows):
    snapshot_rows.append(winner(config={"chunk_size": 16, "solve": "triangular"}, source="shipped"))
    assert explain().source == "shipped" and explain().config["chunk_size"] == 16
    TuningStore(user_db).put_winner(winner())
    dispatch.reset()
    e = explain()
    assert e.source == "user" and e.config == {"chunk_size": 32, "solve": "substitution"}


def test_nearest_bucket_serves_an_untuned_length(user_db, snapshot_rows):
    TuningStore(user_db).put_winner(winner())
    longer = Case("gdn", 1, 2000, 1, 2, 16, "float32")
    e = explain(longer)
    assert e.source.startswith("nearest user (bucket distance 2")
    assert e.config == {"chunk_size": 32, "solve": "substitution"}


def test_stale_row_is_passed_over_and_said(user_db, snapshot_rows):
    TuningStore(user_db).put_winner(winner(source_hash="f" * 16))
    e = explain()
    assert e.source == "default"
    assert any("stale" in p for p in e.passed_over)


def test_invalid_config_is_skipped_with_a_warning_and_never_built(user_db, snapshot_rows, monkeypatch):
    built = []
    kernel = get_kernel(KERNEL)
    monkeypatch.setattr("tileops.dispatch.compile_cache.built", lambda k, c, s: built.append(c) or kernel.build(c, s))
    TuningStore(user_db).put_winner(winner(config={"chunk_size": 48, "solve": "triangular"}))
    e = explain()
    assert e.source == "default" and any("invalid config" in p for p in e.passed_over)
    op, args = call()
    with pytest.warns(TuningRowWarning, match="passed over: user row .*invalid config"):
        op(*args)


def test_no_database_io_after_the_first_lookup(user_db, snapshot_rows, monkeypatch):
    reads = []
    original = UserDatabase.nearest
    monkeypatch.setattr(UserDatabase, "nearest", lambda self, key: reads.append(key) or original(self, key))
    TuningStore(user_db).put_winner(winner())
    for tokens in (300, 310, 290, 300):
        op, args = call(Case("gdn", 1, tokens, 1, 2, 16, "float32"))
        op(*args)
    assert len(reads) == 1


def _checksum(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_dispatch_never_writes(user_db, snapshot_rows, tmp_path):
    TuningStore(user_db).put_winner(winner())
    path = tmp_path / "tuning.db"
    sqlite3.connect(path).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
    before = _checksum(path)
    op, args = call()
    op(*args)
    assert _checksum(path) == before


def _op_still_works(expect_warning: bool) -> None:
    op, args = call(seed=1)
    reference = make_op(CASE, target="reference")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        o, state = op(*args)
        op(*make_inputs(CASE, seed=2))
    faults = [w for w in caught if "cannot be read" in str(w.message)]
    assert len(faults) == (1 if expect_warning else 0), [str(w.message) for w in caught]
    assert torch.allclose(o, reference(*args)[0])


def test_corrupted_database_falls_back_and_warns_once(tmp_path, monkeypatch, snapshot_rows):
    path = tmp_path / "tuning.db"
    path.write_bytes(b"this is not a database" * 100)
    monkeypatch.setenv("TILEOPS_DB", str(path))
    dispatch.reset()
    _op_still_works(expect_warning=True)
    assert explain().source == "default"


def test_unreadable_database_falls_back(tmp_path, monkeypatch, snapshot_rows):
    path = tmp_path / "tuning.db"
    path.mkdir()  # a folder where the file should be: unreadable even for root
    monkeypatch.setenv("TILEOPS_DB", str(path))
    dispatch.reset()
    _op_still_works(expect_warning=True)


def test_locked_database_falls_back(tmp_path, monkeypatch, snapshot_rows):
    path = tmp_path / "tuning.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    with TuningStore(url) as store:
        store.put_winner(winner())
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("PRAGMA journal_mode=DELETE")
    lock.execute("PRAGMA locking_mode=EXCLUSIVE")
    lock.execute("BEGIN EXCLUSIVE")
    try:
        monkeypatch.setenv("TILEOPS_DB", url)
        dispatch.reset()
        _op_still_works(expect_warning=True)
    finally:
        lock.execute("ROLLBACK")
        lock.close()


def test_missing_database_is_simply_empty(tmp_path, monkeypatch, snapshot_rows):
    monkeypatch.setenv("TILEOPS_DB", str(tmp_path / "absent.db"))
    dispatch.reset()
    _op_still_works(expect_warning=False)
    assert not (tmp_path / "absent.db").exists(), "dispatch must never create the database"


def test_outdated_schema_warns_with_the_upgrade_command(tmp_path, monkeypatch, snapshot_rows):
    path = tmp_path / "tuning.db"
    sqlite3.connect(path).execute("CREATE TABLE unrelated (x INTEGER)").close()
    monkeypatch.setenv("TILEOPS_DB", str(path))
    dispatch.reset()
    op, args = call()
    with pytest.warns(TuningDatabaseWarning, match="tileops-db upgrade"):
        op(*args)

"""TuningStore round trips on SQLite, PostgreSQL and MariaDB, upserts, lookups, read-only use, and
a damaged file."""

import hashlib
import os
from pathlib import Path

import pytest
from tests.support.db import make_trial, make_winner

from tileops.db.errors import DatabaseUnreadable, ReadOnlyStore, StoreError
from tileops.db.schemas import RunRecord, record_key
from tileops.db.store import TuningStore
from tileops.db.key import TuningKey


def without_id(record):
    return record.model_copy(update={"id": None})


def test_a_run_starts_and_finishes(db_url):
    with TuningStore(db_url) as store:
        run_id = store.start_run(RunRecord(arch="sm90", device_name="NVIDIA H200", op_filter="gdn",
                                           host="node-1", versions={"torch": "2.13.0", "cuda": None}))
        assert store.run(run_id).status == "running"
        store.finish_run(run_id, "interrupted")
        run = store.run(run_id)
    assert (run.status, run.op_filter, run.versions) == ("interrupted", "gdn", {"torch": "2.13.0", "cuda": None})
    assert run.finished_at >= run.started_at
    with pytest.raises(ValueError, match="run status must be one of"):
        TuningStore(db_url).finish_run(run_id, "done")


def test_trials_come_back_as_they_went_in(db_url):
    with TuningStore(db_url) as store:
        run_id = store.start_run(RunRecord(arch="sm90", device_name="NVIDIA H200", host="node-1"))
        sent = [make_trial(run_id=run_id),
                make_trial(config={"block": 32, "stages": 1}, status="compile_error", median_ms=None,
                           p20_ms=None, p80_ms=None, repeats=0, error="ptxas: too many registers")]
        ids = [store.add_trial(t) for t in sent]
        got = store.trials()
        assert [t.id for t in got] == ids
        assert [without_id(t) for t in got] == sent
        assert [t.id for t in store.trials(status="compile_error")] == ids[1:]
        assert store.trials(run_id=run_id, op="gdn")[0].id == ids[0]
        assert store.trials(op="kda") == []


def test_a_measured_config_is_found_again_by_key_and_config(db_url):
    trial = make_trial(config={"stages": 2, "block": 64})
    with TuningStore(db_url) as store:
        store.add_trial(trial)
        key = record_key(trial)
        assert isinstance(key, TuningKey)
        found = store.find_trial(key, '{ "block": 64, "stages": 2 }')  # any spelling of the JSON
        assert found is not None and without_id(found) == trial
        assert store.find_trial(key, '{"block": 128, "stages": 2}') is None
        assert store.find_trial(key, trial.config_json, source_hash="another-source") is None
        other_key = record_key(make_trial(bucket_tokens=13))
        assert store.find_trial(other_key, trial.config_json) is None


def test_put_winner_replaces_the_row_of_the_same_key(db_url):
    with TuningStore(db_url) as store:
        first = store.put_winner(make_winner())
        second = store.put_winner(make_winner(config={"block": 128, "stages": 1}, time_ms=0.25, source="user"))
        rows = store.winners()
    assert first == second and len(rows) == 1
    assert (rows[0].config, rows[0].time_ms, rows[0].source) == ({"block": 128, "stages": 1}, 0.25, "user")


def test_winners_filter_on_key_columns_and_sort_by_key(db_url):
    records = [make_winner(op=op, dtype=dtype, bucket_tokens=bucket)
               for op in ("kda", "gdn") for dtype in ("float16", "bfloat16") for bucket in (13, 2, 10)]
    with TuningStore(db_url) as store:
        store.put_winners(records)
        everything = store.winners()
        assert [(r.op, r.dtype, r.bucket_tokens) for r in everything] == sorted(
            (r.op, r.dtype, r.bucket_tokens) for r in records)
        gdn_half = store.winners(op="gdn", dtype="float16", arch=None)
        assert [r.bucket_tokens for r in gdn_half] == [2, 10, 13]
        assert len(store.winners(flags='{ "mode": "prefill" }', dim_k=128)) == len(records)
        assert store.winners(kernel="nope") == []
        with pytest.raises(ValueError, match="cannot filter winners on"):
            store.winners(colour="red")


def test_delete_winners_by_id_or_filter_but_never_all_by_accident(db_url):
    with TuningStore(db_url) as store:
        ids = store.put_winners([make_winner(bucket_rows=r) for r in range(4)])
        assert store.delete_winners(ids=ids[:1]) == 1
        assert store.delete_winners(bucket_rows=3) == 1
        with pytest.raises(ValueError, match="needs ids or a filter"):
            store.delete_winners()
        assert [r.bucket_rows for r in store.winners()] == [1, 2]


def test_text_compares_exactly_as_written(db_url):
    """Keys and configs differing only in letter case are different ones, on every backend."""
    trial = make_trial(config={"layout": "A"})
    with TuningStore(db_url) as store:
        store.put_winners([make_winner(device_name="NVIDIA H200"), make_winner(device_name="nvidia h200")])
        assert len(store.winners()) == 2
        store.add_trial(trial)
        assert store.find_trial(record_key(trial), '{"layout": "a"}') is None


def test_a_readonly_store_reads_and_never_writes(sqlite_url):
    with TuningStore(sqlite_url) as store:
        store.put_winner(make_winner())
        store.add_trial(make_trial())
    path = Path(sqlite_url.removeprefix("sqlite:///"))
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with TuningStore(sqlite_url, readonly=True) as reader:
        assert len(reader.winners()) == 1 and len(reader.trials()) == 1
        for write in (lambda: reader.put_winner(make_winner(bucket_rows=1)),
                      lambda: reader.add_trial(make_trial()),
                      lambda: reader.delete_winners(op="gdn"),
                      lambda: reader.start_run(RunRecord(arch="cpu", device_name="cpu", host="h"))):
            with pytest.raises(ReadOnlyStore, match="opened read-only"):
                write()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_readonly_server_store_cannot_write_even_past_the_store(server_url):
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    TuningStore(server_url).close()
    with TuningStore(server_url, readonly=True) as reader:
        with pytest.raises(DBAPIError, match=r"(?i)read.only transaction"):
            with reader.engine.begin() as connection:
                connection.execute(text("DELETE FROM winners"))


def test_a_damaged_file_raises_a_clear_error(tmp_path):
    path = tmp_path / "tuning.db"
    path.write_bytes(os.urandom(8192))
    for readonly in (False, True):
        with pytest.raises(DatabaseUnreadable, match=r"file is not a database; if the file is damaged, move"):
            TuningStore(str(path), readonly=readonly)


@pytest.mark.parametrize("url", ["postgresql://nobody@127.0.0.1:1/nothing", "mysql://nobody@127.0.0.1:1/nothing"])
def test_an_unreachable_server_raises_a_clear_error(url):
    with pytest.raises(DatabaseUnreadable, match="check that the server is up"):
        TuningStore(url)


def test_the_default_optuna_storage_is_a_file_beside_the_database(tmp_path):
    with TuningStore(str(tmp_path / "tuning.db")) as store:
        assert store.default_optuna_storage() == f"sqlite:///{tmp_path / 'tuning.optuna.db'}"


def test_a_server_database_has_no_default_optuna_storage(server_url):
    with TuningStore(server_url) as store, pytest.raises(StoreError, match="--storage"):
        store.default_optuna_storage()

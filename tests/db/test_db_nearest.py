"""The nearest-winners query and what reads it without SQLAlchemy: the store runs it on SQLite,
PostgreSQL and MariaDB as a plain rule says it should, the sqlite3 reader returns exactly the
store's records, and the light constants agree with the models and the migrations."""

from __future__ import annotations

import dataclasses
import random
import sqlite3
from datetime import datetime, timedelta, timezone
from itertools import product

import pytest
from sqlalchemy import update
from sqlalchemy.engine import URL
from tests.support.db import make_winner

from tileops.db.engine import display_url, resolve_url, sqlite_path
from tileops.db.key import TuningKey
from tileops.db.location import sqlite_url
from tileops.db.migrate import head_revision
from tileops.db.models import Winner
from tileops.db.schemas import record_key
from tileops.db.sqlite_reader import NotServed, SqliteReader
from tileops.db.store import TuningStore
from tileops.db.tables import HEAD_REVISION, WINNER_COLUMNS

DEVICES = ("NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA GH200 480GB")
FAMILY = record_key(make_winner())


def fill_random(url: str, rnd: random.Random, rows: int = 48) -> dict[int, str]:
    """``rows`` winners of one family across devices and buckets (ties in distance included),
    some of other families, and a few corrupted past validation; returns {id: why malformed}."""
    cells = rnd.sample(list(product(DEVICES, range(14), range(9))), rows)
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    records = [make_winner(device_name=device, bucket_tokens=t, bucket_rows=r,
                           config={"block": rnd.choice([32, 64, 128]), "stages": rnd.choice([1, 2])},
                           time_ms=rnd.uniform(0.01, 5.0), speedup=rnd.uniform(1.0, 3.0),
                           created_at=start + timedelta(seconds=rnd.uniform(0, 1e7)))
               for device, t, r in cells]
    records += [make_winner(dim_k=64, bucket_tokens=rnd.randrange(14)),
                make_winner(flags='{"mode":"decode"}', bucket_rows=rnd.randrange(9))]
    with TuningStore(url) as store:
        rnd.shuffle(records)
        ids = store.put_winners(records)
        family_ids = [row_id for row_id, record in zip(ids, records) if record_key(record).family == FAMILY.family]
        broken = {"config_json": "{not json", "time_ms": -1.0, "bucket_tokens": -1}
        bad = dict(zip(rnd.sample(family_ids, len(broken)), broken))
        with store.engine.begin() as connection:
            for row_id, column in bad.items():
                connection.execute(update(Winner).where(Winner.id == row_id).values({column: broken[column]}))
    return bad


def some_keys(rnd: random.Random) -> list[TuningKey]:
    """Keys of the family on each device and on one with no rows, and a key of no family."""
    keys = [dataclasses.replace(FAMILY, device_name=device, bucket_tokens=rnd.randrange(16),
                                bucket_rows=rnd.randrange(11)) for device in DEVICES]
    keys.append(dataclasses.replace(FAMILY, device_name="a device with no rows", bucket_tokens=rnd.randrange(16)))
    keys.append(dataclasses.replace(FAMILY, dtype="float16"))
    return keys


def expected_ids(url: str, key: TuningKey, limit: int) -> list[int]:
    """The rule, in Python over every row: the family's rows of this device, else of the others,
    by bucket distance then id, at most ``limit``."""
    with TuningStore(url, readonly=True) as store:
        good, bad = store.winner_rows()
    rows = [(r.id, r.key) for r in bad] + [(r.id, dict(r.model_dump())) for r in good]
    family = [(row_id, cells) for row_id, cells in rows
              if all(cells[name] == getattr(key, name) for name in ("op", "kernel", "arch", "dtype",
                                                                   "dim_k", "dim_v", "flags"))]
    for same in (True, False):
        chosen = sorted((abs(cells["bucket_tokens"] - key.bucket_tokens) + abs(cells["bucket_rows"] - key.bucket_rows),
                         row_id) for row_id, cells in family if (cells["device_name"] == key.device_name) == same)
        if chosen:
            return [row_id for _, row_id in chosen[:limit]]
    return []


@pytest.fixture
def rnd(rng):
    return random.Random(rng.initial_seed())


def test_the_store_picks_the_nearest_rows_on_every_backend(db_url, rnd):
    bad = fill_random(db_url, rnd)
    with TuningStore(db_url, readonly=True) as store:
        for key, limit in product(some_keys(rnd), (5, 32)):
            good, malformed = store.nearest_winners(key, limit)
            want = expected_ids(db_url, key, limit)
            assert [r.id for r in good] == [i for i in want if i not in bad], key
            assert [r.id for r in malformed] == [i for i in want if i in bad], key


def test_the_sqlite_reader_returns_the_stores_records(tmp_path, rnd):
    path = tmp_path / "tuning.db"
    fill_random(str(path), rnd, rows=rnd.randrange(40, 60))
    reader = SqliteReader(path)
    served = []
    with TuningStore(str(path), readonly=True) as store:
        for key, limit in product(some_keys(rnd), (7, 32)):
            good, bad = store.nearest_winners(key, limit)
            light_good, light_bad = reader.nearest_winners(key, limit)
            assert [r.model_dump() for r in light_good] == [r.model_dump() for r in good], key
            assert light_bad == bad, key
            served += light_good
    reader.close()
    assert len({r.device_name for r in served}) > 1 and any(r.created_at.microsecond for r in served)


def test_the_reader_serves_only_a_regular_file_at_the_head_revision(tmp_path, rnd):
    path = tmp_path / "tuning.db"
    fill_random(str(path), rnd)
    SqliteReader(path).close()
    folder = tmp_path / "folder.db"
    folder.mkdir()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(rnd.randbytes(4096))
    for unserved in (folder, garbage, tmp_path / "absent.db"):
        with pytest.raises(NotServed):
            SqliteReader(unserved)
    for change in ("UPDATE alembic_version SET version_num = '0001'", "DELETE FROM alembic_version",
                   "DROP TABLE alembic_version"):
        copy = tmp_path / f"copy{rnd.randrange(10**9)}.db"
        copy.write_bytes(path.read_bytes())
        with sqlite3.connect(copy) as connection:
            connection.execute(change)
        with pytest.raises(NotServed):
            SqliteReader(copy)


def test_a_time_the_reader_cannot_parse_is_not_served(tmp_path, rnd):
    path = tmp_path / "tuning.db"
    fill_random(str(path), rnd, rows=40)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE winners SET created_at = 'yesterday'")
    with pytest.raises(NotServed):
        SqliteReader(path).nearest_winners(FAMILY, 32)


def test_the_light_constants_agree_with_the_models_and_the_migrations():
    assert WINNER_COLUMNS == tuple(Winner.__table__.columns.keys())
    assert HEAD_REVISION == head_revision()


@pytest.mark.parametrize("name", ["a b/t+1.db", "q?x#y%z/@h:2/é.db", "%41;a=b&c.db"])
def test_a_files_url_is_written_as_sqlalchemy_writes_and_shows_it(tmp_path, name):
    path = tmp_path / name
    url = sqlite_url(path)
    assert url == URL.create("sqlite", database=str(path)).render_as_string()
    assert display_url(url) == url == resolve_url(str(path))
    assert sqlite_path(url) == path



@pytest.mark.parametrize("stored", ["2025-03-04T05:06:07.250000+02:00", "2025-03-04", "2025-03-04 05:06"])
def test_times_another_tool_stored_read_back_as_the_store_reads_them(tmp_path, rnd, stored):
    path = tmp_path / "tuning.db"
    fill_random(str(path), rnd, rows=40)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE winners SET created_at = ?", (stored,))
    key = dataclasses.replace(FAMILY, device_name=rnd.choice(DEVICES))
    with TuningStore(str(path), readonly=True) as store:
        good, _ = store.nearest_winners(key, 32)
    light, _ = SqliteReader(path).nearest_winners(key, 32)
    assert good and [r.model_dump() for r in light] == [r.model_dump() for r in good]

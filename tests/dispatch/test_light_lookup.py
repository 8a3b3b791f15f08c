"""An op call's first lookup in a SQLite file named by a path reads it with sqlite3: no SQLAlchemy
or Alembic is imported, the records are the store's, and every file the light reader does not
serve warns exactly as the store always has."""

from __future__ import annotations

import dataclasses
import json
import random
import sqlite3
import subprocess
import sys
import warnings

import pytest

from tests.db.test_db_nearest import DEVICES, fill_random
from tileops.db.key import TuningKey
from tileops.db.location import sqlite_url
from tileops.db.schemas import WinnerRecord
from tileops.db.store import TuningStore
from tileops.dispatch.userdb import NEAREST_ROWS, UserDatabase
from tileops.errors import TuningDatabaseWarning, TuningRowWarning

# A fresh process: import the ops, read the nearest rows of each key, print them and the heavy
# modules that came in.
CHILD = """
import json, sys
import tileops.linear_attention
from tileops.db.key import TuningKey
from tileops.dispatch.userdb import UserDatabase

database = UserDatabase(sys.argv[1])
for fields in json.loads(sys.argv[2]):
    print(json.dumps([r.model_dump(mode="json") for r in database.nearest(TuningKey(**fields))]))
heavy = sorted(m for m in sys.modules if m.partition(".")[0] in ("sqlalchemy", "alembic")
               or m in ("tileops.db.models", "tileops.db.store", "tileops.db.migrate", "tileops.db.engine"))
assert "sqlalchemy" not in sys.modules and "alembic" not in sys.modules, heavy
print(json.dumps(heavy))
"""


@pytest.fixture
def rnd(rng):
    return random.Random(rng.initial_seed())


@pytest.fixture
def filled(tmp_path, rnd):
    """A current database file with winners across devices and buckets and malformed rows;
    yields (path, the malformed rows by id)."""
    path = tmp_path / "tuning.db"
    fill_random(str(path), rnd, rows=rnd.randrange(40, 60))
    with TuningStore(str(path), readonly=True) as store:
        malformed = {row.id: row for row in store.winner_rows()[1]}
    return path, malformed


def test_a_fresh_process_reads_the_stores_records_without_sqlalchemy(filled, rnd, tmp_path):
    path, malformed = filled
    bad = rnd.choice(sorted(malformed.values(), key=lambda row: row.id))
    own = TuningKey(**bad.key)
    keys = [own, dataclasses.replace(own, device_name="a device with no rows", bucket_rows=rnd.randrange(12)),
            dataclasses.replace(own, device_name=rnd.choice(DEVICES), bucket_tokens=rnd.randrange(16))]
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), json.dumps([dataclasses.asdict(k) for k in keys])],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    *lines, heavy = done.stdout.splitlines()
    assert json.loads(heavy) == []
    with TuningStore(str(path), readonly=True) as store:
        expected = [store.nearest_winners(key, NEAREST_ROWS)[0] for key in keys]
    got = [[WinnerRecord.model_validate(row) for row in json.loads(line)] for line in lines]
    assert [[r.model_dump() for r in rows] for rows in got] == [[r.model_dump() for r in rows] for rows in expected]
    assert {r.device_name for r in got[1]} != {own.device_name} and got[0]
    assert f"tuning row {bad.id} of {sqlite_url(path)} passed over ({bad.reason}); tileops-db prune removes it" \
        in done.stderr


def lookups(name: str, keys: list[TuningKey]) -> tuple[list[list[dict]], list[tuple[type, str]]]:
    """Each key's records from ``UserDatabase(name)``, and the warnings it gave."""
    database = UserDatabase(name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = [[r.model_dump() for r in database.nearest(key)] for key in keys]
    return records, [(w.category, str(w.message)) for w in caught]


def test_a_path_and_its_url_serve_and_warn_alike(filled, rnd):
    path, malformed = filled
    keys = [TuningKey(**row.key) for row in malformed.values()]
    keys += [dataclasses.replace(keys[0], device_name=rnd.choice(DEVICES), bucket_rows=rnd.randrange(12))]
    light = lookups(str(path), keys)
    assert light == lookups(sqlite_url(path), keys)
    assert {category for category, _ in light[1]} == {TuningRowWarning}


def outdated(path, _rnd):
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0001'")


def unrecorded(path, _rnd):
    with sqlite3.connect(path) as connection:
        connection.execute("DROP TABLE alembic_version")


def newer(path, rnd):
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE alembic_version SET version_num = ?", (f"{rnd.randrange(10**6):x}",))


def unparsable_time(path, _rnd):
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE winners SET created_at = 'last week'")


def garbage(path, rnd):
    path.write_bytes(rnd.randbytes(8192))


def folder(path, _rnd):
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize("spoil", [outdated, unrecorded, newer, unparsable_time, garbage, folder])
def test_a_file_the_light_reader_does_not_serve_warns_as_the_store_does(filled, rnd, spoil):
    path, malformed = filled
    spoil(path, rnd)
    keys = [TuningKey(**next(iter(malformed.values())).key)] * 2
    light = lookups(str(path), keys)
    assert light == lookups(sqlite_url(path), keys)
    records, caught = light
    assert records == [[], []] and len(caught) == 1 and caught[0][0] is TuningDatabaseWarning


def test_an_outdated_file_warns_with_todays_words(filled):
    path, malformed = filled
    outdated(path, None)
    shown = sqlite_url(path)
    _, caught = lookups(str(path), [TuningKey(**next(iter(malformed.values())).key)])
    assert caught == [(TuningDatabaseWarning,
                       f"tuning database {shown} cannot be read (SchemaOutOfDate: {shown} is at schema revision "
                       f"0001, this tileops needs 0002; migrate it with: tileops-db upgrade --db {shown}); "
                       "using the shipped snapshot and default configs")]

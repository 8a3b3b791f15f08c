"""A malformed row is one bad row (passed over with a warning, the family's good rows still serve),
and a key's first lookup reads only the rows nearest to it, however many its family holds."""

from __future__ import annotations

import dataclasses
import time
import warnings

from sqlalchemy import insert, update

from tests.dispatch.test_dispatch import CASE, explain, snapshot_rows, user_db, winner  # noqa: F401
from tileops import dispatch
from tileops.db.schemas import record_key
from tileops.db.models import Winner
from tileops.db.store import TuningStore
from tileops.dispatch.userdb import NEAREST_ROWS, UserDatabase
from tileops.errors import TuningRowWarning

GOOD = {"chunk_size": 32, "solve": "substitution"}


def corrupt(url: str, row_id: int, **columns) -> None:
    """Write raw column values past the records' validation, as a foreign tool might."""
    with TuningStore(url) as store, store.engine.begin() as connection:
        connection.execute(update(Winner).where(Winner.id == row_id).values(**columns))


def test_a_malformed_row_is_passed_over_and_the_family_still_served(user_db, snapshot_rows):
    with TuningStore(user_db) as store:
        bad_id = store.put_winner(winner())
        store.put_winner(winner(bucket_tokens=winner().bucket_tokens + 1))
    corrupt(user_db, bad_id, config_json="{not json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        e = explain()
    assert e.source.startswith("nearest user (bucket distance 1") and e.config == GOOD
    messages = [str(w.message) for w in caught if issubclass(w.category, TuningRowWarning)]
    assert len(messages) == 1 and f"tuning row {bad_id} " in messages[0] and "malformed row" in messages[0]


def test_out_of_range_values_are_malformed_too(user_db):
    with TuningStore(user_db) as store:
        good_id, bad_id = store.put_winners([winner(), winner(bucket_tokens=3)])
        corrupt(user_db, bad_id, time_ms=-1.0)
        good, bad = store.winner_rows()
    assert [r.id for r in good] == [good_id]
    assert [r.id for r in bad] == [bad_id] and "time_ms" in bad[0].reason


def test_the_first_lookup_reads_only_the_nearest_rows(user_db, snapshot_rows, monkeypatch):
    own = winner()
    base = dict(own.model_dump(exclude={"id", "config"}), config_json='{"chunk_size":16,"solve":"triangular"}')
    rows = [dict(base, device_name=f"device {i}") for i in range(20_000)]
    with TuningStore(user_db) as store:
        with store.engine.begin() as connection:
            connection.execute(insert(Winner), rows)
        store.put_winner(own)
    key = record_key(own)
    database = UserDatabase(user_db)
    start = time.perf_counter()
    database.nearest(key)  # opens the database: the schema check
    opened = time.perf_counter()
    nearest = database.nearest(dataclasses.replace(key, bucket_rows=key.bucket_rows + 1))
    done = time.perf_counter()
    print(f"\nfamily of 20,001 rows: open {1000 * (opened - start):.1f} ms, "
          f"a key's lookup {1000 * (done - opened):.1f} ms ({len(nearest)} rows read)")
    assert [row.id for row in nearest] == [database.nearest(key)[0].id]
    assert nearest[0].device_name == own.device_name
    elsewhere = database.nearest(dataclasses.replace(key, device_name="a device with no rows"))
    assert len(elsewhere) == NEAREST_ROWS and {row.device_name for row in elsewhere} != {own.device_name}
    dispatch.reset()
    e = explain()
    assert e.source == "user" and e.config == GOOD

"""JSONL export, reading with per-line reasons, diffs, and the round trip through a database."""

import io
import json

from tests.support.db import make_winner

from tileops.db.jsonl import diff_winners, export_winners, read_winners, sort_key
from tileops.db.store import TuningStore

RECORDS = [make_winner(op=op, bucket_tokens=bucket, time_ms=0.1 * (bucket + 1), call=None if op == "kda" else
                       '{"op":"gdn","tokens":4096}')
           for op in ("kda", "gdn") for bucket in (12, 3)]


def test_export_sorts_by_key_sorts_fields_and_leaves_out_ids(tmp_path):
    path = tmp_path / "winners.jsonl"
    shuffled = [RECORDS[2], RECORDS[0].model_copy(update={"id": 41}), RECORDS[3], RECORDS[1]]
    assert export_winners(shuffled, path) == 4
    lines = path.read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [(r["op"], r["bucket_tokens"]) for r in rows] == [("gdn", 3), ("gdn", 12), ("kda", 3), ("kda", 12)]
    assert all(list(r) == sorted(r) and "id" not in r for r in rows)
    stream = io.StringIO()
    export_winners(reversed(shuffled), stream)
    assert stream.getvalue() == path.read_text()


def test_read_winners_returns_the_records_exported(tmp_path):
    path = tmp_path / "winners.jsonl"
    export_winners(RECORDS, path)
    records, rejects = read_winners(path)
    assert rejects == []
    assert records == sorted(RECORDS, key=sort_key)
    assert read_winners(io.StringIO(path.read_text()))[0] == records


def test_a_database_round_trip_gives_the_same_bytes(tmp_path, db_url):
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    export_winners(RECORDS, first)
    with TuningStore(db_url) as store:
        store.put_winners(read_winners(first)[0])
        export_winners(store.winners(), second)
    assert second.read_bytes() == first.read_bytes()


def test_every_bad_line_is_refused_with_its_number_and_reason(tmp_path):
    good = json.loads(json.dumps(make_winner().model_dump(mode="json", exclude={"id"})))
    lines = [
        json.dumps(good),
        "",
        "{this is not json",
        json.dumps(dict(good, dim_k=0, source="borrowed")),
        json.dumps(dict(good, time_ms=9.0)),  # same key as line 1
        json.dumps(dict(good, bucket_rows=1)),
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    records, rejects = read_winners(path)
    assert [r.bucket_rows for r in records] == [6, 1]
    assert [line for line, _ in rejects] == [3, 4, 5]
    reasons = dict(rejects)
    assert reasons[3].startswith("not JSON:")
    assert "dim_k: Input should be greater than 0" in reasons[4]
    assert "source: Input should be 'tuned', 'shipped' or 'user'" in reasons[4]
    assert reasons[5] == "same tuning key as line 1"


def test_diff_matches_rows_by_key():
    old = [RECORDS[0], RECORDS[1], RECORDS[2].model_copy(update={"id": 7})]
    new = [RECORDS[2].model_copy(update={"id": 99}),
           RECORDS[1].model_copy(update={"time_ms": 0.01}),
           RECORDS[3]]
    diff = diff_winners(old, new)
    assert diff.added == [RECORDS[3]]
    assert diff.removed == [RECORDS[0]]
    assert diff.changed == [(RECORDS[1], new[1])]
    assert not diff_winners(old, list(reversed(old)))

"""The pydantic records: what they accept, what they refuse, and their tuning key."""

import dataclasses
from datetime import datetime, timedelta, timezone

import pytest
from tests.support.db import make_trial, make_winner
from pydantic import ValidationError

from tileops.db.models import KEY_COLUMNS
from tileops.db.schemas import RunRecord, canonical_json, record_key
from tileops.db.key import TuningKey, flags_json


def test_key_columns_are_the_fields_of_the_tuning_key():
    assert KEY_COLUMNS == tuple(f.name for f in dataclasses.fields(TuningKey))


def test_flags_are_stored_in_the_same_canonical_form_as_dispatch_keys():
    flags = (("use_qk_l2norm", True), ("mode", "prefill"), ("chunk", 64))
    record = make_winner(flags={"use_qk_l2norm": True, "mode": "prefill", "chunk": 64})
    assert record.flags == flags_json(flags) == canonical_json(dict(flags))
    assert make_winner(flags='{ "mode" : "prefill" }').flags == '{"mode":"prefill"}'


def test_record_key_is_the_dispatch_key():
    record = make_trial()
    key = record_key(record)
    assert isinstance(key, TuningKey)
    assert dataclasses.asdict(key) == {name: getattr(record, name) for name in KEY_COLUMNS}


@pytest.mark.parametrize("field, value, message", [
    ("op", "", "at least 1 character"),
    ("kernel", "   ", "at least 1 character"),
    ("dim_k", 0, "greater than 0"),
    ("dim_v", -64, "greater than 0"),
    ("bucket_rows", -1, "greater than or equal to 0"),
    ("flags", "[1, 2]", "flags must be a JSON object"),
    ("flags", "{not json", "Invalid JSON|Expecting property name"),
    ("source", "guessed", "'tuned', 'shipped' or 'user'"),
    ("time_ms", 0, "greater than 0"),
    ("config", "block=64", "valid dictionary"),
    ("colour", "red", "Extra inputs are not permitted"),
])
def test_a_winner_with_a_bad_field_is_refused(field, value, message):
    with pytest.raises(ValidationError, match=message):
        make_winner(**{field: value})


def test_trial_status_must_be_known_and_ok_needs_a_time():
    with pytest.raises(ValidationError, match="'ok', 'compile_error', 'wrong', 'crashed', 'timeout' or 'invalid'"):
        make_trial(status="fine")
    with pytest.raises(ValidationError, match="status 'ok' needs median_ms"):
        make_trial(median_ms=None)
    assert make_trial(status="timeout", median_ms=None).median_ms is None


def test_times_are_utc_whatever_zone_they_came_in():
    local = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=9)))
    assert make_winner(created_at=local).created_at == local
    assert make_winner(created_at=local).created_at.tzinfo == timezone.utc
    assert make_winner(created_at=datetime(2026, 1, 2)).created_at.tzinfo == timezone.utc
    with pytest.raises(ValidationError, match="'running', 'ok', 'failed' or 'interrupted'"):
        RunRecord(arch="cpu", device_name="cpu", host="h", status="paused")

"""Validated records of the tuning database: what the store takes and returns, and what a JSONL
line holds.

Field names are the column names (the key flattened, as in ``tileops.db.key.TuningKey``), except
``config``: a dict here, canonical JSON text in the database. Times are zone-aware UTC. String
limits are the column widths, so a record that validates also fits its row on every backend.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, Optional

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from tileops.db.key import KEY_COLUMNS, TuningKey
from tileops.db.tables import RUN_STATUSES, TRIAL_STATUSES, WINNER_SOURCES


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal values give equal text (for flags, the same
    text as ``tileops.db.key.flags_json``)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def utc_now() -> datetime:
    """The current instant, zone-aware UTC."""
    return datetime.now(timezone.utc)


def _as_utc(value: datetime) -> datetime:
    """Naive times are taken as UTC (that is how the database stores them)."""
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)]
Hash = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=64)]
Version = Annotated[str, StringConstraints(max_length=64)]
Width = Annotated[int, Field(gt=0)]
Bucket = Annotated[int, Field(ge=0)]
NonNegative = Annotated[float, Field(ge=0)]
Positive = Annotated[float, Field(gt=0)]
UtcTime = Annotated[datetime, AfterValidator(_as_utc)]


class KeyedRecord(BaseModel):
    """A config for one tuning key; ``flags`` is canonical JSON text of an object."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    op: Name
    kernel: Name
    arch: Name
    device_name: Name
    dtype: Name
    dim_k: Width
    dim_v: Width
    flags: Annotated[str, StringConstraints(max_length=1024)] = "{}"
    bucket_tokens: Bucket
    bucket_rows: Bucket
    config: dict[str, Any]

    @field_validator("flags", mode="before")
    @classmethod
    def _canonical_flags(cls, value: Any) -> str:
        parsed = json.loads(value) if isinstance(value, str) else value
        if not isinstance(parsed, dict):
            raise ValueError('flags must be a JSON object, e.g. {"use_gate": true}')
        return canonical_json(parsed)

    @property
    def config_json(self) -> str:
        """The config as the database stores it."""
        return canonical_json(self.config)


class TrialRecord(KeyedRecord):
    """One candidate measured for one key; timings are absent unless it ran. ``noise`` is the
    relative spread of the same config timed twice, where it was measured."""

    id: Optional[int] = None
    run_id: Optional[int] = None
    status: Literal[TRIAL_STATUSES]
    median_ms: Optional[NonNegative] = None
    p20_ms: Optional[NonNegative] = None
    p80_ms: Optional[NonNegative] = None
    repeats: Annotated[int, Field(ge=0)] = 0
    noise: Optional[NonNegative] = None
    rel_error: Optional[NonNegative] = None
    compile_s: Optional[NonNegative] = None
    error: Optional[str] = None
    source_hash: Hash
    created_at: UtcTime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _ok_has_time(self) -> "TrialRecord":
        if self.status == "ok" and self.median_ms is None:
            raise ValueError("a trial with status 'ok' needs median_ms")
        return self


class WinnerRecord(KeyedRecord):
    """The config dispatch uses for one key, and its provenance. ``call`` is the JSON of the
    representative call it was tuned on, so that ``tileops-db warm`` can compile it again."""

    id: Optional[int] = None
    time_ms: Positive
    default_ms: Optional[Positive] = None
    speedup: Optional[Positive] = None
    rel_error: Optional[NonNegative] = None
    source_hash: Hash
    tilelang_version: Optional[Version] = None
    torch_version: Optional[Version] = None
    cuda_version: Optional[Version] = None
    call: Optional[str] = None
    created_at: UtcTime = Field(default_factory=utc_now)
    source: Literal[WINNER_SOURCES] = "tuned"


class RunRecord(BaseModel):
    """One tuner invocation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: Optional[int] = None
    started_at: UtcTime = Field(default_factory=utc_now)
    finished_at: Optional[UtcTime] = None
    heartbeat_at: Optional[UtcTime] = None
    arch: Name
    device_name: Name
    op_filter: Optional[Annotated[str, StringConstraints(max_length=256)]] = None
    host: Name
    versions: dict[str, Optional[str]] = Field(default_factory=dict)
    status: Literal[RUN_STATUSES] = "running"


def record_key(record: KeyedRecord) -> TuningKey:
    """The ``TuningKey`` of a trial or winner record."""
    return TuningKey(**{name: getattr(record, name) for name in KEY_COLUMNS})


def describe_errors(err: ValidationError) -> str:
    """A pydantic error on one line: ``field: problem; field: problem``."""
    parts = []
    for error in err.errors():
        where = ".".join(str(part) for part in error["loc"])
        parts.append(f"{where}: {error['msg']}" if where else error["msg"])
    return "; ".join(parts)

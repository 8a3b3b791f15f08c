"""The tables: tuning runs, every measured trial, and one winning config per tuning key.

The key columns carry the names of the fields of ``tileops.db.key.TuningKey``, so a key and a row
convert field by field. Configs and flags are canonical JSON text (sorted keys, no spaces): equal
configs are equal strings, which is what lets the tuner skip a config it has already measured.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional

from sqlalchemy import (
    JSON,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from tileops.db.key import KEY_COLUMNS
from tileops.db.tables import RUN_STATUSES, TRIAL_STATUSES, WINNER_SOURCES

# MySQL and MariaDB get types of their own where theirs would differ from SQLite's and
# PostgreSQL's (whose DDL these variants leave as it was): DOUBLE, as their FLOAT is single
# precision; DATETIME(6), as their DATETIME drops fractions of a second; binary collations for the
# key and the config, which compare byte for byte elsewhere; and ASCII for the key's identifiers and
# the canonical JSON (ASCII by construction), as an index holds at most 3072 bytes and utf8mb4
# takes 4 per character.
MYSQL = ("mysql", "mariadb")
_ASCII = dict(charset="ascii", collation="ascii_bin")
Float64 = Float().with_variant(mysql.DOUBLE(asdecimal=False), *MYSQL)
Identifier = String(128).with_variant(mysql.VARCHAR(128, **_ASCII), *MYSQL)
DeviceName = String(128).with_variant(mysql.VARCHAR(128, charset="utf8mb4", collation="utf8mb4_bin"), *MYSQL)
FlagsJson = String(1024).with_variant(mysql.VARCHAR(1024, **_ASCII), *MYSQL)
ConfigJson = Text().with_variant(mysql.TEXT(**_ASCII), *MYSQL)


def _one_of(column: str, values: tuple[str, ...], name: str) -> CheckConstraint:
    allowed = ", ".join(f"'{v}'" for v in values)
    return CheckConstraint(f"{column} IN ({allowed})", name=name)


class UtcDateTime(TypeDecorator):
    """A UTC instant stored without a zone (the same on every backend), read back zone-aware."""

    impl = DateTime().with_variant(mysql.DATETIME(fsp=6), *MYSQL)
    cache_ok = True

    def process_bind_param(self, value: Optional[datetime], dialect: Any) -> Optional[datetime]:
        if value is None or value.tzinfo is None:
            return value
        return value.astimezone(timezone.utc).replace(tzinfo=None)

    def process_result_value(self, value: Optional[datetime], dialect: Any) -> Optional[datetime]:
        return None if value is None else value.replace(tzinfo=timezone.utc)


class Base(DeclarativeBase):
    """The metadata every migration is compared against."""


class KeyColumns:
    """The tuning key, flattened into columns."""

    op: Mapped[str] = mapped_column(Identifier)
    kernel: Mapped[str] = mapped_column(Identifier)
    arch: Mapped[str] = mapped_column(Identifier)
    device_name: Mapped[str] = mapped_column(DeviceName)
    dtype: Mapped[str] = mapped_column(Identifier)
    dim_k: Mapped[int] = mapped_column(Integer)
    dim_v: Mapped[int] = mapped_column(Integer)
    flags: Mapped[str] = mapped_column(FlagsJson)
    bucket_tokens: Mapped[int] = mapped_column(Integer)
    bucket_rows: Mapped[int] = mapped_column(Integer)


class TuningRun(Base):
    """One invocation of the tuner: where it ran, with which versions, and how it ended.

    ``heartbeat_at`` is refreshed while the tuner lives, so a run left ``running`` by a killed
    tuner can be told from one still going (and is then marked interrupted)."""

    __tablename__ = "tuning_runs"
    __table_args__ = (_one_of("status", RUN_STATUSES, "ck_tuning_runs_status"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finished_at: Mapped[Optional[datetime]] = mapped_column(UtcDateTime, nullable=True)
    heartbeat_at: Mapped[Optional[datetime]] = mapped_column(UtcDateTime, nullable=True)
    arch: Mapped[str] = mapped_column(String(128))
    device_name: Mapped[str] = mapped_column(String(128))
    op_filter: Mapped[Optional[str]] = mapped_column(String(256), nullable=True)
    host: Mapped[str] = mapped_column(String(128))
    versions: Mapped[dict] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))


class Trial(KeyColumns, Base):
    """One measured (or failed) candidate config for one key."""

    __tablename__ = "trials"
    __table_args__ = (
        Index("ix_trials_key", *KEY_COLUMNS),
        _one_of("status", TRIAL_STATUSES, "ck_trials_status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[Optional[int]] = mapped_column(
        ForeignKey("tuning_runs.id", ondelete="SET NULL"), nullable=True, index=True)
    config_json: Mapped[str] = mapped_column(ConfigJson)
    status: Mapped[str] = mapped_column(String(16))
    median_ms: Mapped[Optional[float]] = mapped_column(Float64, nullable=True)
    p20_ms: Mapped[Optional[float]] = mapped_column(Float64, nullable=True)
    p80_ms: Mapped[Optional[float]] = mapped_column(Float64, nullable=True)
    repeats: Mapped[int] = mapped_column(Integer)
    noise: Mapped[Optional[float]] = mapped_column(Float64, nullable=True)
    rel_error: Mapped[Optional[float]] = mapped_column(Float64, nullable=True)
    compile_s: Mapped[Optional[float]] = mapped_column(Float64, nullable=True)
    error: Mapped[Optional[str]] = mapped_column(Text, nullable=True)
    source_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class Winner(KeyColumns, Base):
    """The config dispatch uses for one key, with what it was measured against and on."""

    __tablename__ = "winners"
    __table_args__ = (
        UniqueConstraint(*KEY_COLUMNS, name="uq_winners_key"),
        _one_of("source", WINNER_SOURCES, "ck_winners_source"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    config_json: Mapped[str] = mapped_column(ConfigJson)
    time_ms: Mapped[float] = mapped_column(Float64)
    default_ms: Mapped[Optional[float]] = mapped_column(Float64, nullable=True)
    speedup: Mapped[Optional[float]] = mapped_column(Float64, nullable=True)
    rel_error: Mapped[Optional[float]] = mapped_column(Float64, nullable=True)
    source_hash: Mapped[str] = mapped_column(String(64))
    tilelang_version: Mapped[Optional[str]] = mapped_column(String(64), nullable=True)
    torch_version: Mapped[Optional[str]] = mapped_column(String(64), nullable=True)
    cuda_version: Mapped[Optional[str]] = mapped_column(String(64), nullable=True)
    call: Mapped[Optional[str]] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    source: Mapped[str] = mapped_column(String(16))

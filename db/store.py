"""TuningStore: how the tuner, the CLI and dispatch read and write the tuning database.

Records go in and come out as the pydantic models of ``db.schemas``; the ORM rows stay inside.
Every write is one transaction, retried while SQLite reports the file locked, so that many
tuning processes can share one file without losing rows.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, Callable, Iterable, Optional, TypeVar

from pydantic import BaseModel
from sqlalchemy import Select, delete, func, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from tileops.db.engine import display_url, make_engine, resolve_url, sqlite_path
from tileops.db.errors import DatabaseUnreadable, ReadOnlyStore, StoreError
from tileops.db.key import TuningKey
from tileops.db.location import sqlite_url
from tileops.db.migrate import ensure_current, require_current
from tileops.db.models import KEY_COLUMNS, RUN_STATUSES, Base, Trial, TuningRun, Winner
from tileops.db.nearest import nearest_winners
from tileops.db.retry import retry_locked
from tileops.db.rows import MalformedRow, as_record, winner_records
from tileops.db.schemas import KeyedRecord, RunRecord, TrialRecord, WinnerRecord, canonical_json, utc_now

T = TypeVar("T")
R = TypeVar("R", bound=BaseModel)

TRIAL_FILTERS = KEY_COLUMNS + ("run_id", "status", "source_hash")
WINNER_FILTERS = KEY_COLUMNS + ("source", "source_hash")


class TuningStore:
    """The tuning database at ``url`` (default: ``resolve_url()``).

    Opening for writing gives a brand-new database its schema; any other database must be at the
    current schema revision (else ``SchemaOutOfDate``). ``readonly=True`` never writes, not even
    the schema, and refuses write calls with ``ReadOnlyStore``. A file that is missing (read-only)
    or not a database raises ``DatabaseUnreadable``.
    """

    def __init__(self, url: Optional[str] = None, *, readonly: bool = False) -> None:
        self.url = resolve_url(url)
        self.readonly = readonly
        self.engine = make_engine(self.url, readonly=readonly)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        try:
            if readonly:
                require_current(self.engine, self.url)
            else:
                retry_locked(lambda: ensure_current(self.engine, self.url))
        except StoreError:
            self.close()
            raise
        except DBAPIError as err:
            self.close()
            raise DatabaseUnreadable(self._unreadable_message(err)) from err

    def _unreadable_message(self, err: DBAPIError) -> str:
        shown = display_url(self.url)
        path = sqlite_path(self.url)
        if path is not None and not path.exists():
            return f"no tuning database at {path}; create one with: tileops-db upgrade --db {path}"
        hint = (f"if the file is damaged, move {path} aside (the next tuning run starts a new one) "
                "or point $TILEOPS_DB elsewhere" if path is not None else
                "check that the server is up and the URL, user and database are right")
        return f"cannot use tuning database {shown}: {err.orig}; {hint}"

    def default_optuna_storage(self) -> str:
        """Where the tuner's Optuna studies live unless told: a SQLite file beside this one.

        Optuna has tables of its own (one named ``trials``), so it never shares this database.
        """
        path = sqlite_path(self.url)
        if path is None:
            raise StoreError(f"no default Optuna storage for {display_url(self.url)}: pass one "
                             "explicitly (tileops-tune --storage URL), a database other than this one")
        return sqlite_url(path.with_name(path.stem + ".optuna.db"))

    def close(self) -> None:
        """Release the connections."""
        self.engine.dispose()

    def __enter__(self) -> "TuningStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing --------------------------------------------------------------------------

    def _write(self, work: Callable[[Session], T]) -> T:
        """``work(session)`` in one committed transaction, retried while the file is locked."""
        if self.readonly:
            raise ReadOnlyStore(f"{display_url(self.url)} was opened read-only; "
                                "open TuningStore(url) without readonly=True to write")

        def attempt() -> T:
            with self._sessions.begin() as session:
                return work(session)

        return retry_locked(attempt)

    def _read(self, query: Select, model: type[R]) -> list[R]:
        with self._sessions() as session:
            return [as_record(model, _values(row)) for row in session.scalars(query)]

    # -- tuning runs -----------------------------------------------------------------------

    def start_run(self, record: RunRecord) -> int:
        """Record the start of a tuning run; returns its id for trials and ``finish_run``."""
        def work(session: Session) -> int:
            row = TuningRun(**_columns(record))
            row.heartbeat_at = row.heartbeat_at or row.started_at
            session.add(row)
            session.flush()
            return row.id

        return self._write(work)

    def finish_run(self, run_id: int, status: str = "ok") -> None:
        """Mark a run finished now with ``status`` (ok, failed or interrupted)."""
        if status not in RUN_STATUSES:
            raise ValueError(f"run status must be one of {RUN_STATUSES}, got {status!r}")

        def work(session: Session) -> None:
            row = session.get(TuningRun, run_id)
            if row is None:
                raise KeyError(f"no tuning run with id {run_id}")
            row.status, row.finished_at = status, utc_now()

        self._write(work)

    def beat(self, run_id: int) -> None:
        """Refresh a running run's heartbeat: it is alive now."""
        self._write(lambda session: session.execute(
            update(TuningRun).where(TuningRun.id == run_id).values(heartbeat_at=utc_now())))

    def interrupt_stale_runs(self, lease_s: float) -> list[int]:
        """Mark ``interrupted`` every run still ``running`` whose heartbeat (or, without one, its
        start) is older than ``lease_s`` seconds: its tuner was killed. It finished at its last
        heartbeat. Returns their ids."""
        cutoff = utc_now() - timedelta(seconds=lease_s)
        last_sign = func.coalesce(TuningRun.heartbeat_at, TuningRun.started_at)

        def work(session: Session) -> list[int]:
            rows = session.scalars(select(TuningRun).where(TuningRun.status == "running", last_sign < cutoff)).all()
            for row in rows:
                row.status, row.finished_at = "interrupted", row.heartbeat_at or row.started_at
            return [row.id for row in rows]

        return self._write(work)

    def runs(self) -> list[RunRecord]:
        """Every tuning run, oldest first."""
        return self._read(select(TuningRun).order_by(TuningRun.id), RunRecord)

    def run(self, run_id: int) -> RunRecord:
        """One tuning run; KeyError when there is none with that id."""
        rows = self._read(select(TuningRun).where(TuningRun.id == run_id), RunRecord)
        if not rows:
            raise KeyError(f"no tuning run with id {run_id}")
        return rows[0]

    # -- trials ----------------------------------------------------------------------------

    def add_trial(self, record: TrialRecord) -> int:
        """Store one trial; returns its id."""
        def work(session: Session) -> int:
            row = Trial(**_columns(record))
            session.add(row)
            session.flush()
            return row.id

        return self._write(work)

    def trials(self, **filters: Any) -> list[TrialRecord]:
        """Trials matching ``filters`` (key columns, run_id, status, source_hash), oldest first."""
        query = select(Trial).where(*_conditions(Trial, filters, TRIAL_FILTERS)).order_by(Trial.id)
        return self._read(query, TrialRecord)

    def find_trial(self, key: TuningKey, config_json: str,
                   source_hash: Optional[str] = None) -> Optional[TrialRecord]:
        """The latest trial of this config for this key (of this kernel source, when given).

        ``config_json`` may be any JSON text of the config; it is compared in canonical form.
        """
        filters = {name: getattr(key, name) for name in KEY_COLUMNS}
        filters["source_hash"] = source_hash
        query = (select(Trial)
                 .where(*_conditions(Trial, filters, TRIAL_FILTERS),
                        Trial.config_json == canonical_json(json.loads(config_json)))
                 .order_by(Trial.id.desc()).limit(1))
        found = self._read(query, TrialRecord)
        return found[0] if found else None

    # -- winners ---------------------------------------------------------------------------

    def put_winner(self, record: WinnerRecord) -> int:
        """Insert or replace the winner of the record's key; returns the row id."""
        return self.put_winners([record])[0]

    def put_winners(self, records: Iterable[WinnerRecord]) -> list[int]:
        """``put_winner`` for many records in one transaction."""
        records = list(records)

        def work(session: Session) -> list[int]:
            ids = []
            for record in records:
                values = _columns(record)
                key = {name: values[name] for name in KEY_COLUMNS}
                row = session.scalars(select(Winner).filter_by(**key)).one_or_none()
                if row is None:
                    row = Winner(**values)
                    session.add(row)
                else:
                    for name, value in values.items():
                        setattr(row, name, value)
                session.flush()
                ids.append(row.id)
            return ids

        try:
            return self._write(work)
        except IntegrityError:
            # Another writer inserted one of these keys between our read and our insert (a
            # server backend; SQLite writers take turns): now the row exists, so this updates it.
            return self._write(work)

    def winners(self, **filters: Any) -> list[WinnerRecord]:
        """Winners matching ``filters`` (key columns, source, source_hash; None = any), in key order;
        malformed rows are left out (``winner_rows`` returns them)."""
        return self.winner_rows(**filters)[0]

    def winner_rows(self, *, limit: Optional[int] = None, offset: int = 0,
                    **filters: Any) -> tuple[list[WinnerRecord], list[MalformedRow]]:
        """(valid winners, malformed rows) matching ``filters``, in key order; ``limit`` and
        ``offset`` page through them. One bad row never fails the read."""
        query = (select(Winner).where(*_conditions(Winner, filters, WINNER_FILTERS))
                 .order_by(*(getattr(Winner, name) for name in KEY_COLUMNS), Winner.id)
                 .offset(offset).limit(limit))
        return self._read_winners(query)

    def count_winners(self, **filters: Any) -> int:
        """How many winners match ``filters``, malformed ones included."""
        query = select(func.count()).select_from(Winner).where(*_conditions(Winner, filters, WINNER_FILTERS))
        with self._sessions() as session:
            return session.scalar(query)

    def nearest_winners(self, key: TuningKey, limit: int) -> tuple[list[WinnerRecord], list[MalformedRow]]:
        """Up to ``limit`` winners of ``key``'s family nearest to it by bucket distance (its own row
        first): this device's, or, when this device has none, other devices'
        (``tileops.db.nearest``, the query dispatch's sqlite3 reader runs too)."""
        types = {column.key: column.type for column in Winner.__table__.columns}
        with self._sessions() as session:
            return nearest_winners(
                lambda sql, params: session.execute(text(sql).columns(**types), params).mappings(), key, limit)

    def _read_winners(self, query: Select) -> tuple[list[WinnerRecord], list[MalformedRow]]:
        with self._sessions() as session:
            return winner_records(_values(row) for row in session.scalars(query))

    def delete_winners(self, ids: Optional[Iterable[int]] = None, **filters: Any) -> int:
        """Delete the winners with these ids and/or matching ``filters``; returns how many.

        At least one of them is required: deleting every winner takes an explicit filter.
        """
        conditions = _conditions(Winner, filters, WINNER_FILTERS)
        if ids is not None:
            conditions.append(Winner.id.in_(list(ids)))
        if not conditions:
            raise ValueError("delete_winners needs ids or a filter; it never deletes every winner")
        return self._write(lambda session: session.execute(delete(Winner).where(*conditions)).rowcount)


def _conditions(table: type[Base], filters: dict[str, Any], allowed: tuple[str, ...]) -> list:
    """WHERE clauses for ``name=value`` filters; None means any value."""
    unknown = sorted(set(filters) - set(allowed))
    if unknown:
        raise ValueError(f"cannot filter {table.__tablename__} on {unknown}; use {', '.join(allowed)}")
    conditions = []
    for name, value in filters.items():
        if value is None:
            continue
        if name == "flags" and isinstance(value, str):
            value = canonical_json(json.loads(value))
        conditions.append(getattr(table, name) == value)
    return conditions


def _columns(record: BaseModel) -> dict[str, Any]:
    """A record as column values; the database assigns ids."""
    values = record.model_dump(exclude={"id", "config"})
    if isinstance(record, KeyedRecord):
        values["config_json"] = record.config_json
    return values


def _values(row: Base) -> dict[str, Any]:
    """An ORM row as a mapping of its column names to values."""
    return {column.key: getattr(row, column.key) for column in row.__table__.columns}

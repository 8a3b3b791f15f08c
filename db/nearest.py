"""Which stored winners may stand in for a key: the SQL that the ORM store and dispatch's sqlite3
reader both run (plain SQL with ``:name`` parameters, which SQLite, PostgreSQL, MySQL and
MariaDB all take), and the rule that picks between its two forms."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable, Iterable, Mapping

from tileops.db.key import TuningKey
from tileops.db.rows import MalformedRow, winner_records
from tileops.db.schemas import WinnerRecord
from tileops.db.tables import WINNER_COLUMNS

# The family's rows of this device ("="), then of the other devices ("<>"), nearest buckets first.
# The device's rows are one range of the key's unique index, so a lookup reads ``:limit`` rows
# however many the family holds. The selected columns are qualified: MySQL reserves ``call``.
_NEAREST = """SELECT {columns} FROM winners AS w
WHERE op = :op AND kernel = :kernel AND arch = :arch AND dtype = :dtype AND dim_k = :dim_k
  AND dim_v = :dim_v AND flags = :flags AND device_name {device} :device_name
ORDER BY ABS(bucket_tokens - :bucket_tokens) + ABS(bucket_rows - :bucket_rows), id
LIMIT :limit"""
NEAREST_QUERIES = tuple(_NEAREST.format(columns=", ".join(f"w.{name}" for name in WINNER_COLUMNS), device=device)
                        for device in ("=", "<>"))

Rows = Iterable[Mapping[str, Any]]


def nearest_winners(run: Callable[[str, dict], Rows], key: TuningKey,
                    limit: int) -> tuple[list[WinnerRecord], list[MalformedRow]]:
    """Up to ``limit`` winners of ``key``'s family nearest to it by bucket distance (its own row
    first): this device's, or, when this device has none, other devices'. ``run(sql, params)``
    executes one query and returns its rows as mappings of ``WINNER_COLUMNS`` to values."""
    params = dict(asdict(key), limit=limit)
    for query in NEAREST_QUERIES:
        good, bad = winner_records(run(query, params))
        if good or bad:
            return good, bad
    return [], []

"""What the tables hold, stated without SQLAlchemy: the values a status column allows, the columns
of the winners table and the schema revision they describe.

``tileops.db.models`` builds its tables from these; the pydantic records, the JSONL form and the
sqlite3 reader of dispatch read them from here, so that none of them imports SQLAlchemy. The
tests check them against the models and the migrations.
"""

from __future__ import annotations

TRIAL_STATUSES = ("ok", "compile_error", "wrong", "crashed", "timeout", "invalid")
WINNER_SOURCES = ("tuned", "shipped", "user")
RUN_STATUSES = ("running", "ok", "failed", "interrupted")

WINNER_COLUMNS = ("id", "config_json", "time_ms", "default_ms", "speedup", "rel_error", "source_hash",
                  "tilelang_version", "torch_version", "cuda_version", "call", "created_at", "source",
                  "op", "kernel", "arch", "device_name", "dtype", "dim_k", "dim_v", "flags",
                  "bucket_tokens", "bucket_rows")

# The newest revision under db/migrations: the one a database must be at to be read.
HEAD_REVISION = "0002"

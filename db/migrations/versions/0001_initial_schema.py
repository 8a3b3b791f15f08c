"""Initial schema: tuning runs, trials and winners.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# The tuning key; the same names as the fields of tileops.db.key.TuningKey.
KEY = ("op", "kernel", "arch", "device_name", "dtype", "dim_k", "dim_v", "flags",
       "bucket_tokens", "bucket_rows")

# MySQL and MariaDB only (the DDL of the other backends is as it was): DOUBLE and DATETIME(6) for
# full precision, binary collations for the key and the config, and ASCII for the key's identifiers
# and the canonical JSON, so that the key's index fits in 3072 bytes. As in db.models, restated
# here: a revision is not to change when the models do.
MYSQL = ("mysql", "mariadb")
ASCII = dict(charset="ascii", collation="ascii_bin")
FLOAT = sa.Float().with_variant(mysql.DOUBLE(asdecimal=False), *MYSQL)
DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), *MYSQL)
IDENTIFIER = sa.String(128).with_variant(mysql.VARCHAR(128, **ASCII), *MYSQL)
DEVICE_NAME = sa.String(128).with_variant(mysql.VARCHAR(128, charset="utf8mb4", collation="utf8mb4_bin"), *MYSQL)
FLAGS_JSON = sa.String(1024).with_variant(mysql.VARCHAR(1024, **ASCII), *MYSQL)
CONFIG_JSON = sa.Text().with_variant(mysql.TEXT(**ASCII), *MYSQL)


def key_columns() -> list[sa.Column]:
    return [
        sa.Column("op", IDENTIFIER, nullable=False),
        sa.Column("kernel", IDENTIFIER, nullable=False),
        sa.Column("arch", IDENTIFIER, nullable=False),
        sa.Column("device_name", DEVICE_NAME, nullable=False),
        sa.Column("dtype", IDENTIFIER, nullable=False),
        sa.Column("dim_k", sa.Integer(), nullable=False),
        sa.Column("dim_v", sa.Integer(), nullable=False),
        sa.Column("flags", FLAGS_JSON, nullable=False),
        sa.Column("bucket_tokens", sa.Integer(), nullable=False),
        sa.Column("bucket_rows", sa.Integer(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "tuning_runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("started_at", DATETIME, nullable=False),
        sa.Column("finished_at", DATETIME, nullable=True),
        sa.Column("arch", sa.String(128), nullable=False),
        sa.Column("device_name", sa.String(128), nullable=False),
        sa.Column("op_filter", sa.String(256), nullable=True),
        sa.Column("host", sa.String(128), nullable=False),
        sa.Column("versions", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.CheckConstraint("status IN ('running', 'ok', 'failed', 'interrupted')",
                           name="ck_tuning_runs_status"),
    )
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("tuning_runs.id", ondelete="SET NULL"),
                  nullable=True),
        *key_columns(),
        sa.Column("config_json", CONFIG_JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("median_ms", FLOAT, nullable=True),
        sa.Column("p20_ms", FLOAT, nullable=True),
        sa.Column("p80_ms", FLOAT, nullable=True),
        sa.Column("repeats", sa.Integer(), nullable=False),
        sa.Column("noise", FLOAT, nullable=True),
        sa.Column("rel_error", FLOAT, nullable=True),
        sa.Column("compile_s", FLOAT, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("source_hash", sa.String(64), nullable=False),
        sa.Column("created_at", DATETIME, nullable=False),
        sa.CheckConstraint(
            "status IN ('ok', 'compile_error', 'wrong', 'crashed', 'timeout', 'invalid')",
            name="ck_trials_status"),
    )
    op.create_index("ix_trials_key", "trials", list(KEY))
    op.create_index("ix_trials_run_id", "trials", ["run_id"])
    op.create_table(
        "winners",
        sa.Column("id", sa.Integer(), primary_key=True),
        *key_columns(),
        sa.Column("config_json", CONFIG_JSON, nullable=False),
        sa.Column("time_ms", FLOAT, nullable=False),
        sa.Column("default_ms", FLOAT, nullable=True),
        sa.Column("speedup", FLOAT, nullable=True),
        sa.Column("rel_error", FLOAT, nullable=True),
        sa.Column("source_hash", sa.String(64), nullable=False),
        sa.Column("tilelang_version", sa.String(64), nullable=True),
        sa.Column("torch_version", sa.String(64), nullable=True),
        sa.Column("cuda_version", sa.String(64), nullable=True),
        sa.Column("call", sa.Text(), nullable=True),
        sa.Column("created_at", DATETIME, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.UniqueConstraint(*KEY, name="uq_winners_key"),
        sa.CheckConstraint("source IN ('tuned', 'shipped', 'user')", name="ck_winners_source"),
    )


def downgrade() -> None:
    # The trials' indexes go with their table: MySQL refuses to drop the one its foreign key uses.
    op.drop_table("winners")
    op.drop_table("trials")
    op.drop_table("tuning_runs")

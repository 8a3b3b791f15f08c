"""Initial schema: tuning runs, trials and winners.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# The tuning key; the same names as the fields of dispatch.key.TuningKey.
KEY = ("op", "kernel", "arch", "device_name", "dtype", "dim_k", "dim_v", "flags",
       "bucket_tokens", "bucket_rows")


def key_columns() -> list[sa.Column]:
    return [
        sa.Column("op", sa.String(128), nullable=False),
        sa.Column("kernel", sa.String(128), nullable=False),
        sa.Column("arch", sa.String(128), nullable=False),
        sa.Column("device_name", sa.String(128), nullable=False),
        sa.Column("dtype", sa.String(128), nullable=False),
        sa.Column("dim_k", sa.Integer(), nullable=False),
        sa.Column("dim_v", sa.Integer(), nullable=False),
        sa.Column("flags", sa.String(1024), nullable=False),
        sa.Column("bucket_tokens", sa.Integer(), nullable=False),
        sa.Column("bucket_rows", sa.Integer(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "tuning_runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
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
        sa.Column("config_json", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("median_ms", sa.Float(), nullable=True),
        sa.Column("p20_ms", sa.Float(), nullable=True),
        sa.Column("p80_ms", sa.Float(), nullable=True),
        sa.Column("repeats", sa.Integer(), nullable=False),
        sa.Column("noise", sa.Float(), nullable=True),
        sa.Column("rel_error", sa.Float(), nullable=True),
        sa.Column("compile_s", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("source_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
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
        sa.Column("config_json", sa.Text(), nullable=False),
        sa.Column("time_ms", sa.Float(), nullable=False),
        sa.Column("default_ms", sa.Float(), nullable=True),
        sa.Column("speedup", sa.Float(), nullable=True),
        sa.Column("rel_error", sa.Float(), nullable=True),
        sa.Column("source_hash", sa.String(64), nullable=False),
        sa.Column("tilelang_version", sa.String(64), nullable=True),
        sa.Column("torch_version", sa.String(64), nullable=True),
        sa.Column("cuda_version", sa.String(64), nullable=True),
        sa.Column("call", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.UniqueConstraint(*KEY, name="uq_winners_key"),
        sa.CheckConstraint("source IN ('tuned', 'shipped', 'user')", name="ck_winners_source"),
    )


def downgrade() -> None:
    op.drop_table("winners")
    op.drop_index("ix_trials_run_id", table_name="trials")
    op.drop_index("ix_trials_key", table_name="trials")
    op.drop_table("trials")
    op.drop_table("tuning_runs")

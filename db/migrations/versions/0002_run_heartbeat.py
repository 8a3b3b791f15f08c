"""A tuning run's heartbeat: the tuner refreshes it, so a run its killed tuner left running is
told from a live one.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# As in 0001: fractional seconds on MySQL and MariaDB.
DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.add_column("tuning_runs", sa.Column("heartbeat_at", DATETIME, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuning_runs") as batch:  # SQLite drops a column by copying the table
        batch.drop_column("heartbeat_at")

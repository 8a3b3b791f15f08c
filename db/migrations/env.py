"""Alembic environment for the tuning database.

The URL is ``-x url=...`` when given, else the Config's ``sqlalchemy.url`` (set by
``db.migrate``), else $TILEOPS_DB, else the default file. All revisions run in one transaction
that migrating processes take in turn, so that several tuning workers opening a new database at
once create the schema exactly once.
"""

from alembic import context
from sqlalchemy import Connection, text

from db.engine import driver_url, make_engine, resolve_url
from db.models import Base

# The key of the PostgreSQL advisory lock held while migrating (any constant shared by all).
_MIGRATION_LOCK = 0x7469_6C65


def _url() -> str:
    explicit = context.get_x_argument(as_dictionary=True).get("url")
    return resolve_url(explicit or context.config.get_main_option("sqlalchemy.url"))


def _take_migration_lock(connection: Connection) -> None:
    # SQLite needs nothing here: the engine begins write transactions with BEGIN IMMEDIATE.
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})


def run_offline(url: str) -> None:
    """Print the SQL of the migrations (``alembic upgrade head --sql``)."""
    context.configure(url=driver_url(url), target_metadata=Base.metadata, literal_binds=True,
                      dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_online(url: str) -> None:
    """Migrate the database itself."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection, connection.begin():
            _take_migration_lock(connection)
            context.configure(connection=connection, target_metadata=Base.metadata,
                              render_as_batch=connection.dialect.name == "sqlite")
            context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline(_url())
else:
    run_online(_url())

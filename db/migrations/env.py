"""Alembic environment for the tuning database.

The URL is ``-x url=...`` when given, else the Config's ``sqlalchemy.url`` (set by
``db.migrate``), else $TILEOPS_DB, else the default file. All revisions run in one transaction
that migrating processes take in turn (``db.migrate.take_migration_lock``), so that several
tuning workers opening a new database at once create the schema exactly once.
"""

from alembic import context

from tileops.db.engine import driver_url, make_engine, resolve_url
from tileops.db.migrate import take_migration_lock
from tileops.db.models import Base


def _url() -> str:
    explicit = context.get_x_argument(as_dictionary=True).get("url")
    return resolve_url(explicit or context.config.get_main_option("sqlalchemy.url"))


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
            take_migration_lock(connection)
            context.configure(connection=connection, target_metadata=Base.metadata,
                              render_as_batch=connection.dialect.name == "sqlite")
            context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline(_url())
else:
    run_online(_url())

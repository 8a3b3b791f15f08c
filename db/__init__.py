"""The tuning database: SQLAlchemy models and engine, Alembic migrations, pydantic records, the
store the tuner writes and the CLI and dispatch read, the sqlite3 reader that serves dispatch a
current SQLite file without SQLAlchemy, and the JSONL form that snapshots and reviews use."""

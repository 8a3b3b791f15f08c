"""The tuning database: SQLAlchemy models and engine, Alembic migrations, pydantic records, the
store the tuner writes and dispatch reads, and the JSONL form that snapshots and reviews use."""

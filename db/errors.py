"""Errors of the tuning database that callers are expected to catch.

``StoreError`` is the one base: dispatch catches it to fall back to the shipped snapshot and the
defaults, and the CLI prints its message on one line.
"""

from __future__ import annotations


class StoreError(RuntimeError):
    """The tuning database cannot be used as asked; the message says what to do."""


class SchemaOutOfDate(StoreError):
    """The database has no tileops schema, or one at another revision than this code's."""


class DatabaseUnreadable(StoreError):
    """The database cannot be opened or is not a tileops database (missing, corrupted, locked out)."""


class ReadOnlyStore(StoreError):
    """A write was asked of a store opened read-only."""

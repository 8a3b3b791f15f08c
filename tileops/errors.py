"""The warnings tileops gives, by what the user can do about each, so that a filter can name one.

Every class derives from ``TileopsWarning``: ``warnings.simplefilter("error", TileopsWarning)``
turns them all into errors.
"""

from __future__ import annotations


class TileopsWarning(UserWarning):
    """Base of every tileops warning."""


class ReferenceFallbackWarning(TileopsWarning):
    """A call on a GPU is served by the PyTorch reference: no in-tree kernel accepts it."""


class TuningRowWarning(TileopsWarning):
    """A stored tuning row was passed over: stale (its kernel's programs changed), invalid, or
    malformed. ``tileops-db show`` lists such rows and ``tileops-db prune`` removes them."""


class TuningDatabaseWarning(TileopsWarning):
    """The tuning database cannot be read; the shipped snapshot and the defaults serve instead."""


class CompileAfterWarmupWarning(TileopsWarning):
    """A kernel compiled on the call path after warm-up (``tileops-db warm`` did not cover it)."""

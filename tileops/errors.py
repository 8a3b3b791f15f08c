"""The warnings tileops gives, by what the user can do about each, so that a filter can name one.

Every class derives from ``TileopsWarning``: ``warnings.simplefilter("error", TileopsWarning)``
turns them all into errors. Each is raised again on every call that meets its cause (a filter, not
tileops, decides what is shown once). ``TILEOPS_STRICT=1`` turns the slow paths into
``StrictModeError``.
"""

from __future__ import annotations

import os
import sys
import warnings


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


class StrictModeError(RuntimeError):
    """Under ``TILEOPS_STRICT=1``: a reference fallback on a GPU, a compile after warm-up, or a
    host read of a device tensor on the call path, each of which would otherwise only cost time."""


STRICT_ENV = "TILEOPS_STRICT"
_INTERNAL = ("tileops.", "torch.")


def strict() -> bool:
    """Whether ``TILEOPS_STRICT`` asks for errors instead of slow paths (read on each call)."""
    return os.environ.get(STRICT_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside tileops and torch: the user's call site."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_globals.get("__name__", "").startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    return level


def warn(category: type[TileopsWarning], message: str) -> None:
    """Warn at the user's call site, every time it is called: a warning filter decides what is
    shown, so under ``simplefilter("error")`` each call raises."""
    warnings.warn(message, category, stacklevel=_caller_level())


def warn_or_raise(category: type[TileopsWarning], message: str) -> None:
    """``warn``, or raise ``StrictModeError`` under ``TILEOPS_STRICT=1``."""
    if strict():
        raise StrictModeError(f"{message} (an error because {STRICT_ENV}=1)")
    warn(category, message)


def host_read(what: str) -> None:
    """Called before a device-to-host copy on the call path: an error under ``TILEOPS_STRICT=1``."""
    if strict():
        raise StrictModeError(f"{what} would be copied from the GPU to the host on the call path, which "
                              f"synchronises the stream (an error because {STRICT_ENV}=1)")

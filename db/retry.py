"""Retrying writes that SQLite refused because another process held the lock too long.

The busy timeout already makes each attempt wait; this is the second line for a very busy file
(many tuning workers): back off with jitter and try again, so that no trial row is lost.
"""

from __future__ import annotations

import random
import time
from typing import Callable, TypeVar

from sqlalchemy.exc import OperationalError

T = TypeVar("T")

ATTEMPTS = 10
FIRST_DELAY_S = 0.05
MAX_DELAY_S = 2.0


def is_locked(err: OperationalError) -> bool:
    """Whether SQLite refused for a lock held elsewhere (worth waiting for), not a real fault."""
    text = str(err.orig).lower()
    return "database is locked" in text or "database table is locked" in text


def retry_locked(work: Callable[[], T]) -> T:
    """``work()``, retried with growing, jittered pauses while the database is locked."""
    delay = FIRST_DELAY_S
    for _ in range(ATTEMPTS - 1):
        try:
            return work()
        except OperationalError as err:
            if not is_locked(err):
                raise
        time.sleep(delay * (0.5 + random.random()))
        delay = min(2 * delay, MAX_DELAY_S)
    return work()

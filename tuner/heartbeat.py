"""A live tuning run's heartbeat, and the lease after which a silent one counts as killed.

A thread refreshes the run's ``heartbeat_at`` every ``HEARTBEAT_S``; a run still ``running`` whose
heartbeat is older than ``LEASE_S`` was left by a killed tuner, and the next run marks it
interrupted. Optuna's trials get the same treatment from its own heartbeat (``open_storage``):
a RUNNING trial silent for ``LEASE_S`` is failed when its study is next run.
"""

from __future__ import annotations

import threading

from tileops.db.store import TuningStore

HEARTBEAT_S = 10
LEASE_S = 60  # six missed beats: a stall of the database or the host is not a death


class Heartbeat:
    """Refreshes run ``run_id``'s heartbeat in a daemon thread until ``stop``; a failed refresh
    (a database fault) is tried again at the next beat."""

    def __init__(self, store: TuningStore, run_id: int, interval_s: float = HEARTBEAT_S) -> None:
        self.store, self.run_id, self.interval_s = store, run_id, interval_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"tileops-run-{run_id}-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stopped.wait(self.interval_s):
            try:
                self.store.beat(self.run_id)
            except Exception:  # the next beat tries again; the run's end reports a lasting fault
                continue

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

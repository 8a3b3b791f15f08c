"""A child process that evaluates candidates, so that one that crashes or hangs cannot take the
tuning run with it: the parent records the failure and starts a fresh child."""

from __future__ import annotations

import json
import multiprocessing as mp
from dataclasses import asdict
from typing import Optional

from tileops.tuner.evaluate import Job, Outcome


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (even by kill -9), so that no worker
    outlives the tuner; elsewhere the closed pipe ends the loop at the next job."""
    import ctypes
    import signal
    import sys

    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _serve(conn) -> None:
    """The child's loop: one JSON job in, one JSON outcome out, until told to stop."""
    _die_with_parent()
    from tileops.tuner.evaluate import evaluate

    while True:
        message = conn.recv_bytes()
        if not message:
            return
        outcome = evaluate(Job(**json.loads(message)))
        conn.send_bytes(json.dumps(outcome.as_dict()).encode())


class CandidateWorker:
    """Evaluates jobs in a long-lived child; replaces it after a crash or a timeout."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._ctx = mp.get_context("spawn")
        self._process: Optional[mp.process.BaseProcess] = None
        self._conn = None

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._process = self._ctx.Process(target=_serve, args=(child,), daemon=True)
        self._process.start()
        child.close()
        self._conn = parent

    def evaluate(self, job: Job) -> Outcome:
        """Run ``job`` in the child and return its outcome, or a crashed/timeout outcome."""
        if self._process is None or not self._process.is_alive():
            self._start()
        try:
            self._conn.send_bytes(json.dumps(asdict(job)).encode())
            if not self._conn.poll(self.timeout_s):
                self._kill()
                return Outcome("timeout", error=f"no result within {self.timeout_s:g} s; the worker was killed")
            return Outcome(**json.loads(self._conn.recv_bytes()))
        except (EOFError, BrokenPipeError, ConnectionResetError):
            code = self._process.exitcode if self._process is not None else None
            self._kill()
            return Outcome("crashed", error=f"the worker process died (exit code {code})")

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join(5)
        self._process = None
        self._conn = None

    def close(self) -> None:
        """Stop the child."""
        if self._process is not None and self._process.is_alive():
            try:
                self._conn.send_bytes(b"")
                self._process.join(5)
            except (BrokenPipeError, OSError):
                pass
        self._kill()

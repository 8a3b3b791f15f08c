"""The tuner's candidate worker dies with its parent, even when the parent is killed with SIGKILL."""

import os
import signal
import subprocess
import sys
import time

from tests.support.db import REPO

PARENT = """
import sys, time
from tileops.tuner.worker import CandidateWorker
worker = CandidateWorker(60)
worker._start()
print(worker._process.pid, flush=True)
time.sleep(60)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead, only not yet reaped
        return stat.read().split(") ")[1][0] != "Z"


def test_a_worker_dies_when_its_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=REPO, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        child = int(parent.stdout.readline())
        time.sleep(1.0)  # the child sets its death signal first thing
        assert alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(child), "the worker outlived its killed parent"
    finally:
        parent.kill()

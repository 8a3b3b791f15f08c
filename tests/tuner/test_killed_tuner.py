"""A tuner killed with SIGKILL leaves its run ``running`` and a trial RUNNING; the next run marks
the run interrupted (its heartbeat is past the lease) and Optuna fails the trial (its heartbeat too)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import optuna

from tests.support.db import REPO
from tests.tuner.test_tuner import _serve_first, _tune

TUNER = """
import sys
from tests.support import fake_kernels
import tileops.targets as targets
targets._REFERENCE_KERNELS["GDNFwdOp"] = (fake_kernels.NAME,) + targets._REFERENCE_KERNELS["GDNFwdOp"]
from tileops.tuner.run import tune
tune(["gdn"], "cpu", ["B1xT96xH1xHV2"], 16, "float32", 8, 120.0, sys.argv[1], sys.argv[2], lambda l, n: (lambda: None))
"""


def running_hang_trials(optuna_db) -> int:
    """Trials RUNNING in the Optuna storage with the config that never returns."""
    if not optuna_db.exists():
        return 0
    with sqlite3.connect(optuna_db) as connection:
        try:
            return connection.execute(
                "SELECT count(*) FROM trials t JOIN trial_params p ON p.trial_id = t.trial_id "
                "WHERE t.state = 'RUNNING' AND p.param_name = 'behaviour' AND p.param_value = 3").fetchone()[0]
        except sqlite3.OperationalError:  # the schema is still being made
            return 0


def test_the_next_run_marks_what_a_killed_tuner_left(tmp_path, monkeypatch):
    from tileops.db.store import TuningStore

    db, optuna_db = tmp_path / "tuning.db", tmp_path / "optuna.db"
    storage = f"sqlite:///{optuna_db}"
    tuner = subprocess.Popen([sys.executable, "-c", TUNER, f"sqlite:///{db}", storage], cwd=REPO,
                             env=dict(os.environ, PYTHONPATH=str(REPO), TILEOPS_EXTRA_KERNELS="tests.support.fake_kernels"))
    try:
        deadline = time.monotonic() + 120
        while not running_hang_trials(optuna_db):  # the hanging config is being measured
            assert tuner.poll() is None and time.monotonic() < deadline, "the tuner never reached the hanging config"
            time.sleep(0.1)
        tuner.send_signal(signal.SIGKILL)
        tuner.wait(10)
    finally:
        tuner.kill()
    [killed] = TuningStore(str(db)).runs()
    assert killed.status == "running" and killed.finished_at is None

    _serve_first(monkeypatch, "test.gdn_behaviour")
    monkeypatch.setattr("tileops.tuner.run.LEASE_S", 1)
    monkeypatch.setattr("tileops.tuner.study.HEARTBEAT_S", 1)
    monkeypatch.setattr("tileops.tuner.study.LEASE_S", 1)
    time.sleep(1.5)
    _tune(f"sqlite:///{db}", storage, timeout=2.0)

    killed_after, finished = TuningStore(str(db)).runs()
    assert killed_after.id == killed.id and killed_after.status == "interrupted"
    assert killed_after.finished_at == killed.heartbeat_at
    assert finished.status == "ok"
    [study] = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=study.study_name, storage=storage).get_trials(deepcopy=False)
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    assert [t for t in trials if t.state == optuna.trial.TrialState.FAIL and t.params["behaviour"] == "hang"]

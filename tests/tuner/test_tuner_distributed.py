"""Two `tileops-tune` workers sharing one study storage and one tuning database on a server
(PostgreSQL, MariaDB) produce one winner set between them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.db import REPO, SERVERS, THROWAWAY_DATABASES


@pytest.mark.parametrize("server", SERVERS)
def test_two_workers_share_studies_and_agree_on_winners(server):
    from tileops.db.store import TuningStore
    from tileops.tuner.winner import choose_winner

    throwaway = THROWAWAY_DATABASES[server]
    with throwaway() as db, throwaway() as storage:
        command = [sys.executable, "-m", "tileops.cli.tune", "--arch", "cpu", "--op", "gdn", "--shapes", "B1xT128xH1xHV2",
                   "--width", "16", "--dtype", "float32", "--trials", "8", "--db", db, "--storage", storage]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        workers = [subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True) for _ in range(2)]
        outputs = [w.communicate(timeout=900)[0] for w in workers]
        assert [w.returncode for w in workers] == [0, 0], outputs
        assert all("tuning winners" in out for out in outputs)
        store = TuningStore(db, readonly=True)
        trials = store.trials(kernel="reference.gdn_chunk")
        configs = {t.config_json for t in trials}
        assert len(configs) == 8, "the two workers covered the whole space between them"
        assert len(trials) <= 10, "the shared study kept the workers from repeating each other's work"
        [winner] = store.winners(kernel="reference.gdn_chunk")
        from tileops.kernels.registry import get_kernel

        default_json = get_kernel("reference.gdn_chunk").config_model().to_json()
        assert winner.config == choose_winner(trials, default_json).winner.config
        assert len({t.run_id for t in trials}) == 2, "both workers measured candidates"

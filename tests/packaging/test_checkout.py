"""A checkout on PYTHONPATH, not installed (as on the GPU machine), imports as the wheel does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CODE = """
import sys
# Drop any installed copy's finders so that only the checkout on sys.path can answer.
sys.meta_path = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()]
sys.path.insert(0, {repo!r})
import tileops.db.engine, tileops.dispatch.router, tileops.tuner.cases, tileops.cli.db
print(tileops.db.engine.__file__, tileops.cli.db.__file__)
"""


def test_the_checkout_serves_its_top_level_folders_as_subpackages(tmp_path):
    done = subprocess.run([sys.executable, "-c", CODE.format(repo=str(REPO))], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    engine, cli = done.stdout.split()
    assert Path(engine) == REPO / "db" / "engine.py" and Path(cli) == REPO / "cli" / "db.py"

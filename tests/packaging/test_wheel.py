"""The wheel: one top-level import name with the data it needs, and an installed copy that works
from a directory whose own db/, cli.py and tuner.py would shadow generic package names."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCE_ITEMS = ("tileops", "db", "dispatch", "tuner", "cli", "setup.py", "pyproject.toml", "README.md")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the sources (the checkout gets no build folders)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    for item in SOURCE_ITEMS:
        copy = shutil.copytree if (REPO / item).is_dir() else shutil.copy2
        copy(REPO / item, source / item, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                            if (REPO / item).is_dir() else {}))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    str(source), "-w", str(work / "dist")], check=True, capture_output=True, timeout=300)
    (built,) = (work / "dist").glob("tileops-*.whl")
    return built


def test_the_wheel_has_one_top_level_name_and_its_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"tileops", wheel.name.split("-py")[0] + ".dist-info"}
    for needed in ("tileops/snapshots/sm90.jsonl", "tileops/db/migrations/env.py",
                   "tileops/db/migrations/script.py.mako", "tileops/db/migrations/versions/0001_initial_schema.py",
                   "tileops/db/engine.py", "tileops/dispatch/router.py", "tileops/tuner/run.py",
                   "tileops/cli/tune.py", "tileops/kernels/registry.py", "tileops/linear_attention/op.py"):
        assert needed in names, needed
    assert not [n for n in names if n.startswith("tileops/tests") or "__pycache__" in n]


OP_CALL = """
import torch
import tileops
from tileops import dispatch
from tileops.linear_attention import GDNFwdOp
assert tileops.__file__.startswith(sys.prefix), tileops.__file__
op = GDNFwdOp(use_qk_l2norm_in_kernel=True)
q, k = torch.randn(1, 70, 2, 64), torch.randn(1, 70, 2, 64)
v, g, beta = torch.randn(1, 70, 4, 64), -torch.rand(1, 70, 4), torch.rand(1, 70, 4)
o, state = op(q, k, v, g, beta)
assert o.shape == (1, 70, 4, 64) and state.shape == (1, 4, 64, 64) and bool(o.isfinite().all())
print(dispatch.explain(op, q, k, v, g, beta))
"""


@pytest.mark.slow
def test_the_installed_wheel_works_where_generic_names_would_shadow_it(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=False)
    python = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    str(wheel)], check=True, capture_output=True, timeout=300)
    here = tmp_path / "project"
    (here / "db").mkdir(parents=True)
    for shadow in ("db/__init__.py", "cli.py", "tuner.py", "dispatch.py"):
        (here / shadow).write_text(f"raise SystemExit('the {shadow} of the working directory was imported')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TILEOPS_DB")}
    env.update(TILEOPS_DB=str(tmp_path / "tuning.db"), COLUMNS="120")

    def run(*command: str) -> str:
        done = subprocess.run(command, cwd=here, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done.stdout

    bin_dir = env_dir / "bin"
    assert "revision" in run(str(bin_dir / "tileops-db"), "upgrade")
    run(str(bin_dir / "tileops-tune"), "--op", "gdn", "--shapes", "B1xT128xH1xHV2", "--trials", "2")
    shown = run(str(bin_dir / "tileops-db"), "show", "--op", "gdn")
    assert "winners" in shown and "no winners match" not in shown
    explanation = run(str(python), "-c", "import sys\n" + OP_CALL)
    assert "GDNFwdOp" in explanation

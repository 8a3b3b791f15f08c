"""On the GPU: a fresh process that finds a call's programs kept runs them without TileLang, and they
give the very outputs of the process that compiled them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[2]

# One call of a case in a fresh process: its outputs saved, and whether TileLang was imported.
CALL = r"""
import json, sys, torch
from tileops.cases import Case
from tileops.tuner.cases import make_inputs, make_op
case = Case.from_json({case!r})
out = make_op(case)(*make_inputs(case, seed=3))
torch.cuda.synchronize()
torch.save([o.cpu() for o in (out if isinstance(out, tuple) else (out,))], {path!r})
print(json.dumps({{"tilelang": "tilelang" in sys.modules}}))
"""


def call_in_fresh_process(case, cache: Path, path: Path) -> dict:
    env = dict(os.environ, TILELANG_CACHE_DIR=str(cache), TILEOPS_DB=str(cache / "none.db"))
    done = subprocess.run([sys.executable, "-c", CALL.format(case=case.to_json(), path=str(path))], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", [
    dict(op="gdn", batch=2, tokens=300, heads=2, value_heads=4, dim=128),
    # one long sequence on few heads: cut into pieces with exact entries, whose summary program's host
    # code makes TMA descriptors (a host function of TileLang's native library)
    dict(op="deltanet", batch=1, tokens=4096, heads=2, value_heads=2, dim=128),
    dict(op="kda", batch=1, tokens=1, heads=2, value_heads=2, dim=64, dtype="float16"),
    dict(op="deltanet", batch=3, tokens=1, heads=2, value_heads=2, dim=128),
], ids=["gdn-prefill", "deltanet-pieces", "kda-decode", "deltanet-decode"])
def test_kept_programs_run_without_tilelang_and_agree_bitwise(case, tmp_path):
    from tileops.cases import Case

    case = Case(device="cuda", **case)
    first = call_in_fresh_process(case, tmp_path, tmp_path / "first.pt")
    second = call_in_fresh_process(case, tmp_path, tmp_path / "second.pt")
    assert first == {"tilelang": True} and second == {"tilelang": False}
    for compiled_here, loaded in zip(torch.load(tmp_path / "first.pt"), torch.load(tmp_path / "second.pt")):
        assert torch.equal(compiled_here, loaded)

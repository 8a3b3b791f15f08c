"""Cold start: a fresh process's import of tileops, the op's construction and its first call, after
`tileops-db warm` filled the compile cache, and the same with a kernel in no cache (its compile)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from typing import Iterator

# torch is imported and the inputs made before the clock starts: a user's process has both.
_FIRST_CALL = r"""
import json, time, torch
sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
sync()
start = time.perf_counter()
import tileops.linear_attention
imported = time.perf_counter()
from tileops.cases import Case
from tileops.tuner.cases import make_inputs, make_op
case = Case.from_json({case!r})
args = make_inputs(case, seed=0)
sync()
begin = time.perf_counter()
op = make_op(case)
built = time.perf_counter()
op(*args)
sync()
done = time.perf_counter()
print(json.dumps({{"import_s": imported - start, "construct_s": built - begin, "first_call_s": done - built}}))
"""
PHASES = ("import_s", "construct_s", "first_call_s")


def first_call_seconds(case_json: str, env: dict | None = None) -> dict:
    """Seconds of a fresh Python process's ``PHASES``: importing tileops, constructing the op and
    its first call (torch's own import and the inputs excluded)."""
    proc = subprocess.run([sys.executable, "-c", _FIRST_CALL.format(case=case_json)], capture_output=True,
                          text=True, env=env, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"first call failed: {proc.stderr[-1500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


COLD, WARM = "empty compile cache", "after `tileops-db warm`"


def measure_cold_start(cases: list) -> Iterator[tuple[str, str, dict]]:
    """(label, ``COLD`` or ``WARM``, ``first_call_seconds``' phases) per case, each as soon as it is
    measured (a run cut short keeps what it had): a fresh process over the case's own compile
    cache, first empty, then after `tileops-db warm` compiled the case's config into it."""
    from tileops.db.schemas import WinnerRecord
    from tileops.dispatch.key import key_for
    from tileops.dispatch.router import route
    from tileops.kernels.registry import get_kernel
    from tileops.tuner.cases import make_inputs, make_op

    for case in cases:
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as folder:
            env = dict(os.environ, TILELANG_CACHE_DIR=cache, TILEOPS_DB=os.path.join(folder, "tuning.db"))
            yield case.label, COLD, first_call_seconds(case.to_json(), env)
            spec, _ = make_op(case.smallest()).describe(*make_inputs(case.smallest(), seed=0))
            chosen = route(spec.entry, None, spec)
            key = key_for(chosen.kernel.name, spec)
            record = WinnerRecord(**asdict(key),
                                  config=chosen.selection.config.model_dump(), time_ms=1.0,
                                  source_hash=get_kernel(chosen.kernel.name).source_hash, call=case.to_json())
            _warm_in_fresh_process(record, env)
            yield case.label, WARM, first_call_seconds(case.to_json(), env)


def _warm_in_fresh_process(record, env: dict) -> None:
    """Store the record and run `tileops-db warm` against that database and cache (its winners only:
    the shipped snapshot's and the presets' would take minutes to compile and are not what the call
    runs)."""
    from tileops.db.store import TuningStore

    with TuningStore(env["TILEOPS_DB"]) as store:
        store.put_winner(record)
    subprocess.run([sys.executable, "-m", "tileops.cli.db", "warm", "--db", env["TILEOPS_DB"], "--no-shipped",
                    "--no-presets"],
                   env=env, check=True, capture_output=True, timeout=900)

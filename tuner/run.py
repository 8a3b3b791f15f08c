"""A tuning run: every key of the requested ops, a study each, winners written at the end of
each key (so an interrupted run keeps what it finished), and a summary."""

from __future__ import annotations

import json
import platform
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

import torch

from tileops.db.schemas import RunRecord, WinnerRecord
from tileops.db.store import TuningStore
from tileops.device import current_arch, current_device_name
from tileops.cases import Case
from tileops.tuner.heartbeat import LEASE_S, Heartbeat
from tileops.tuner.known import known_configs
from tileops.tuner.plan import plan
from tileops.tuner.precompile import CompileOnlyWorker
from tileops.tuner.presets import cases_for
from tileops.tuner.study import KeyStudy, KeyTask, open_storage
from tileops.tuner.winner import Verdict, choose_winner
from tileops.tuner.worker import CandidateWorker

OPS = ("deltanet", "gdn", "kda", "gla")


@dataclass(frozen=True)
class KeyResult:
    """One line of the summary."""

    case: Case
    kernel: str
    verdict: Optional[Verdict]
    skipped: str = ""


def versions() -> dict[str, Optional[str]]:
    """The versions a tuning row records as provenance."""
    try:
        import tilelang

        tilelang_version = tilelang.__version__
    except Exception:  # tilelang absent or broken: the CPU reference still tunes
        tilelang_version = None
    return {"tilelang": tilelang_version, "torch": torch.__version__, "cuda": torch.version.cuda}


def check_arch(arch: Optional[str]) -> str:
    """The architecture to tune: the current device's, which is the only one that can be timed."""
    here = current_arch()
    if arch is None:
        return here
    if arch != here:
        raise ValueError(f"--arch {arch} asked for, but this machine's device is {here}: tuning times "
                         f"kernels, so run it on a {arch} machine (or pass --arch {here})")
    return arch


def winner_record(task: KeyTask, verdict: Verdict, source_hash: str) -> WinnerRecord:
    """The winners-table row of a verdict."""
    key = asdict(task.key)
    win, default = verdict.winner, verdict.default
    v = versions()
    return WinnerRecord(
        **key, config=win.config, time_ms=win.median_ms, default_ms=default.median_ms if default else None,
        speedup=default.median_ms / win.median_ms if default else None, rel_error=win.rel_error,
        source_hash=source_hash, tilelang_version=v["tilelang"], torch_version=v["torch"],
        cuda_version=v["cuda"], source="tuned", call=task.case.to_json())


def tune(ops: list[str], arch: Optional[str], shapes: list[str], dim: Optional[int], dtype: Optional[str],
         trials: int, timeout_s: float, db: Optional[str], storage: Optional[str],
         on_key: Callable[[str, int], Callable[[], None]], compile_only: bool = False) -> list[KeyResult]:
    """Tune every case of ``ops``; ``on_key(label, total)`` returns a per-trial progress callback.

    ``compile_only`` builds the candidates the same run would measure, for ``arch``, into the
    compile cache (no GPU needed, nothing kept in ``db``): `tileops-tune --compile-only`.
    """
    if compile_only:
        if not arch or arch == "cpu":
            raise ValueError("--compile-only needs a GPU architecture to compile for, e.g. --arch sm90")
        return _compile_only(ops, arch, shapes, dim, dtype, trials, on_key)
    arch = check_arch(arch)
    store = TuningStore(db)
    storage = open_storage(storage or store.default_optuna_storage())
    return _run(ops, arch, current_device_name(), shapes, dim, dtype, trials, store, storage,
                CandidateWorker(timeout_s), on_key)


def _compile_only(ops, arch, shapes, dim, dtype, trials, on_key) -> list[KeyResult]:
    with tempfile.TemporaryDirectory() as folder:
        store = TuningStore(str(Path(folder) / "scratch.db"))
        try:
            return _run(ops, arch, "compile-only", shapes, dim, dtype, trials, store,
                        open_storage(f"sqlite:///{Path(folder) / 'scratch.optuna.db'}"), CompileOnlyWorker(arch),
                        on_key)
        finally:
            store.close()


def _run(ops, arch, device_name, shapes, dim, dtype, trials, store, storage, worker, on_key) -> list[KeyResult]:
    device = "cpu" if arch == "cpu" else "cuda"
    store.interrupt_stale_runs(LEASE_S)
    run_id = store.start_run(RunRecord(arch=arch, device_name=device_name, op_filter=",".join(ops),
                                       host=platform.node() or "unknown", versions=versions()))
    results: list[KeyResult] = []
    status = "failed"
    heartbeat = Heartbeat(store, run_id)
    try:
        for op in ops:
            for case in cases_for(op, arch, shapes, dim, dtype):
                for call, task, why in plan(case.on(device), arch, device_name):
                    results.append(_tune_call(call, task, why, store, worker, storage, run_id, trials, on_key))
        status = "ok"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        heartbeat.stop()
        worker.close()
        store.finish_run(run_id, status)
    return results


def _tune_call(case: Case, task: Optional[KeyTask], why: str, store: TuningStore, worker: CandidateWorker,
               storage: object, run_id: int, trials: int,
               on_key: Callable[[str, int], Callable[[], None]]) -> KeyResult:
    """One op call's study (``plan``'s task) and its winner; a call without a task is skipped for ``why``."""
    if task is None:
        return KeyResult(case, "-", None, skipped=why)
    study = KeyStudy(task, store, worker, storage, run_id)
    study.enqueue(known_configs(store, task.key))
    study.run(trials, on_key(case.label, study.goal(trials)))
    trials = store.trials(**asdict(task.key),
                          source_hash=task.kernel.source_hash)
    verdict = choose_winner(trials, study.default_json)
    if verdict.winner is not None:
        store.put_winner(winner_record(task, verdict, task.kernel.source_hash))
    return KeyResult(case, task.kernel.name, verdict)


def summary_rows(results: list[KeyResult]) -> list[dict]:
    """The summary as plain rows (the CLI renders them; tests read them)."""
    rows = []
    for r in results:
        v = r.verdict
        win = v.winner if v else None
        rows.append({
            "key": r.case.label, "kernel": r.kernel,
            "default_ms": v.default.median_ms if v and v.default else None,
            "winner_ms": win.median_ms if win else None,
            "speedup": (v.default.median_ms / win.median_ms) if v and v.default and win else None,
            "rel_error": win.rel_error if win else None,
            "config": json.dumps(win.config, sort_keys=True) if win else "-",
            "note": r.skipped or (v.reason if v else ""),
        })
    return rows

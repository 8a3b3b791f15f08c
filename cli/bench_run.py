"""Runs the benchmark rows: ours in this process, each peer in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import torch

from tileops.cli.bench_cases import flops, floor_ms, state_bytes
from tileops.cases import Case
from tileops.tuner.cases import make_inputs, make_op
from tileops.tuner.timing import time_cuda

PEERS = ("fla", "tileops")
PEER_SCRIPT = Path(__file__).with_name("peer_bench.py")


def time_ours(case: Case, gates: str = "benchmark") -> dict:
    """Our op on one row (a training row: the chunked forward and then the backward on what it
    saved, timed as one call): first-call seconds (compile or cache load) and the median ms."""
    op = make_op(case)
    args = make_inputs(case, seed=1, gates=gates)
    start = time.perf_counter()
    op(*args)
    torch.cuda.synchronize()
    first_s = time.perf_counter() - start
    return {"ms": time_cuda(lambda: op(*args)).median_ms, "first_call_s": first_s}


def time_peer(peer: str, cases: list[Case], pythonpath: str, timeout_s: float = 900,
              gates: str = "benchmark") -> dict[str, dict]:
    """One peer's results per row label, run as `python3 -P peer_bench.py` from a neutral folder."""
    rows = [dict(asdict(c), label=c.label, seqlens=list(c.seqlens) if c.seqlens else None, gates=gates)
            for c in cases]
    env = dict(os.environ, PYTHONPATH=pythonpath)
    command = [sys.executable, "-P", str(PEER_SCRIPT), "--peer", peer, "--cases", json.dumps(rows)]
    try:
        proc = subprocess.run(command, cwd="/tmp", env=env, capture_output=True, text=True, timeout=timeout_s)
        stdout, failed = proc.stdout, proc.returncode != 0
        stderr = proc.stderr
    except subprocess.TimeoutExpired as err:  # keep the rows the peer finished
        stdout = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        failed, stderr = True, f"{peer} ran past {timeout_s:g} s"
    results = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            results[row["label"]] = row
    if failed and not results:
        results["_error"] = {"error": stderr[-2000:]}
    return results


def bench(cases: list[Case], peers_path: Optional[str], peer_timeout_s: float = 900,
          gates: str = "benchmark") -> list[dict]:
    """Every row, its gates drawn as ``gates`` says (``tileops.cases.log_decays``): our time, each
    peer's, the work and the floor."""
    ours = {}
    for c in cases:  # each figure as it comes, so that a run cut short still shows what it measured
        ours[c.label] = time_ours(c, gates)
        print(f"ours {c.label}: {ours[c.label]['ms']:.4f} ms (first call {ours[c.label]['first_call_s']:.1f} s)",
              flush=True)
    peers = {}
    for p in PEERS if peers_path else ():
        start = time.perf_counter()
        peers[p] = time_peer(p, cases, peers_path, peer_timeout_s, gates)
        done = ", ".join(f"{label} {r['ms']:.4f} ms" for label, r in peers[p].items() if r.get("ms") is not None)
        print(f"{p} in {time.perf_counter() - start:.0f} s: {done or 'no rows'}", flush=True)
    out = []
    for c in cases:
        label = c.label if gates == "benchmark" else f"{c.label} [{gates} gates]"
        row = {"label": label, "gates": gates, "train": c.entry == "train", "ours_ms": ours[c.label]["ms"],
               "first_call_s": ours[c.label]["first_call_s"],
               "floor_ms": floor_ms(c), "gflop": flops(c) / 1e9, "state_mb": state_bytes(c) / 1e6}
        for p in peers:
            row[f"{p}_ms"] = peers[p].get(c.label, {}).get("ms")
            row[f"{p}_error"] = peers[p].get(c.label, {}).get("error") or peers[p].get("_error", {}).get("error")
        out.append(row)
    return out

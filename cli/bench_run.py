"""Runs the benchmark rows: ours in this process, each peer in its own process."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

import torch

from tileops.cli.bench_cases import flops, floor_ms, state_bytes
from tileops.cases import Case
from tileops.tuner.cases import GATE16_OPS, make_inputs, make_op
from tileops.tuner.timing import time_cuda

PEERS = ("fla", "tileops")
PEER_SCRIPT = Path(__file__).with_name("peer_bench.py")


def first_call(case: Case, gates: str = "benchmark", gate16: bool = False) -> tuple[Callable[[], object], float]:
    """Our op on one row (a training row: the chunked forward and then the backward on what it
    saved, as one call), called once: the call, and that first call's seconds (compile or cache
    load). ``gate16``: KDA's and GLA's gate in the input dtype instead of fp32."""
    op = make_op(case)
    args = make_inputs(case, seed=1, gates=gates, gate16=gate16)
    start = time.perf_counter()
    op(*args)
    torch.cuda.synchronize()
    return (lambda: op(*args)), time.perf_counter() - start


def row_label(case: Case, gates: str, gate16: bool = False) -> str:
    """A row's label: the case's, the gates it draws unless they are the benchmark's, and a 16-bit
    gate where KDA's or GLA's comes in the input dtype."""
    label = case.label if gates == "benchmark" else f"{case.label} [{gates} gates]"
    return f"{label} [16-bit gate]" if gate16 and case.op in GATE16_OPS else label


def peer_command(peer: str, rows: list[tuple[Case, str]], gate16: bool = False) -> list[str]:
    """`python3 -P peer_bench.py --hold` on the rows (case, gates): the peer's own process, from a
    neutral folder."""
    payload = [dict(asdict(c), label=row_label(c, g, gate16), seqlens=list(c.seqlens) if c.seqlens else None, gates=g,
                    gate16=gate16 and c.op in GATE16_OPS) for c, g in rows]
    return [sys.executable, "-P", str(PEER_SCRIPT), "--peer", peer, "--cases", json.dumps(payload), "--hold"]


class PeerRun:
    """One peer's process. It first calls every row once (its compiles and autotuning, which take
    minutes and may run beside another peer's), says so, and times the rows when ``go`` tells it
    to. It may run ``timeout_s`` seconds of its own: its first calls, then its timings."""

    def __init__(self, peer: str, rows: list[tuple[Case, str]], pythonpath: str, timeout_s: float,
                 gate16: bool = False):
        self.peer, self.timeout_s = peer, timeout_s
        self.lines: list[str] = []
        self.warmed = threading.Event()
        self.problem: Optional[str] = None
        self.warm_s: Optional[float] = None
        self.stderr = tempfile.TemporaryFile("w+")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(peer_command(peer, rows, gate16), cwd="/tmp", text=True,
                                     env=dict(os.environ, PYTHONPATH=pythonpath),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith('{"warmed"'):
                self.warmed.set()
            elif line.startswith("{"):
                self.lines.append(line)
        self.warmed.set()  # at its end too, so that no one waits on a peer that died

    def wait_warm(self) -> float:
        """Seconds until every row had its first call (the process stopped if it ran out of time)."""
        if self.warm_s is None:
            if not self.warmed.wait(self.timeout_s - (time.perf_counter() - self.started)):
                self._stop()
            self.warm_s = time.perf_counter() - self.started
        return self.warm_s

    def go(self) -> dict[str, dict]:
        """Time the rows (the rest of its time to do it in); its results per row label."""
        warm_s = self.wait_warm()
        try:
            self.proc.stdin.write("go\n")
            self.proc.stdin.close()
        except (BrokenPipeError, ValueError):  # it stopped already: its rows say why
            pass
        try:
            self.proc.wait(max(self.timeout_s - warm_s, 1.0))
        except subprocess.TimeoutExpired:
            self._stop()
        self.reader.join()
        results = {}
        for line in self.lines:
            row = json.loads(line)
            results[row["label"]] = row
        if (self.problem or self.proc.returncode) and not any(r.get("ms") is not None for r in results.values()):
            self.stderr.seek(0)
            results["_error"] = {"error": self.problem or self.stderr.read()[-2000:]}
        return results

    def _stop(self) -> None:  # keep the rows it finished
        self.problem = f"{self.peer} ran past {self.timeout_s:g} s"
        self.proc.kill()
        self.proc.wait()


def start_peers(rows: list[tuple[Case, str]], pythonpath: str, timeout_s: float,
                gate16: bool = False) -> list[PeerRun]:
    """Every peer's process, making its first calls on the rows (case, gates)."""
    return [PeerRun(p, rows, pythonpath, timeout_s, gate16) for p in PEERS]


def finish_peers(runs: list[PeerRun]) -> dict[str, dict[str, dict]]:
    """Each peer's results per row label: once every peer has made its first calls, each peer's
    timings in turn."""
    for run in runs:
        run.wait_warm()
    peers = {}
    for run in runs:
        start = time.perf_counter()
        peers[run.peer] = run.go()
        done = ", ".join(f"{label} {r['ms']:.4f} ms" for label, r in peers[run.peer].items() if r.get("ms") is not None)
        print(f"{run.peer}: first calls {run.warm_s:.0f} s, timings {time.perf_counter() - start:.0f} s: "
              f"{done or 'no rows'}", flush=True)
    return peers


def bench(cases: list[Case], peers_path: Optional[str], peer_timeout_s: float = 900,
          gates: tuple[str, ...] = ("benchmark",), gate16: bool = False) -> list[dict]:
    """Every row under each gate kind of ``gates`` (``tileops.cases.log_decays``): our time, each
    peer's, the work and the floor; ``gate16``: KDA's and GLA's gate in the input dtype."""
    # The peers' first calls (compiles and autotuning: minutes) run beside ours; every timing runs
    # alone, after all of them. Each figure is printed as it comes, so that a run cut short still
    # shows what it measured.
    rows = [(c, g) for c in cases for g in gates]
    runs = start_peers(rows, peers_path, peer_timeout_s, gate16) if peers_path else []
    calls = {}
    for c, g in rows:
        label = row_label(c, g, gate16)
        calls[label] = first_call(c, g, gate16)
        print(f"ours {label}: first call {calls[label][1]:.1f} s", flush=True)
    for run in runs:
        run.wait_warm()
    ours = {}
    for label, (call, first_s) in calls.items():
        ours[label] = {"ms": time_cuda(call).median_ms, "first_call_s": first_s}
        print(f"ours {label}: {ours[label]['ms']:.4f} ms", flush=True)
    peers = finish_peers(runs)
    device, today = torch.cuda.get_device_name(), datetime.date.today().isoformat()
    out = []
    for c, g in rows:
        label = row_label(c, g, gate16)
        row = {"label": label, "gates": g, "train": c.entry == "train", "ours_ms": ours[label]["ms"],
               "first_call_s": ours[label]["first_call_s"], "device": device, "date": today,
               "floor_ms": floor_ms(c), "gflop": flops(c) / 1e9, "state_mb": state_bytes(c) / 1e6}
        for p in peers:
            row[f"{p}_ms"] = peers[p].get(label, {}).get("ms")
            row[f"{p}_error"] = peers[p].get(label, {}).get("error") or peers[p].get("_error", {}).get("error")
        out.append(row)
    return out

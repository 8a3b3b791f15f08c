"""tileops-bench's peers: their first calls run side by side, their timings one peer at a time and
only once every peer has finished its first calls; a peer past its time is stopped with the rows
it finished kept. Stand-in peer processes that log when they warm and when they time."""

from __future__ import annotations

import sys

import pytest

from tileops.cases import Case
from tileops.cli import bench_run

ROWS = [Case("gdn", 1, 64, 2, 2, 64, "bfloat16")]

STAND_IN = '''
import json, sys, time
name, warm_s, log = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def note(what):
    with open(log, "a") as f:
        f.write(f"{time.monotonic()} {name} {what}\\n")
note("start")
time.sleep(warm_s)
print(json.dumps({"label": "broken", "peer": name, "ms": None, "error": "RuntimeError: cannot"}), flush=True)
note("warmed")
print(json.dumps({"warmed": True}), flush=True)
sys.stdin.readline()
note("timing")
time.sleep(0.3)
print(json.dumps({"label": "row", "peer": name, "ms": 1.5}), flush=True)
note("timed")
'''


@pytest.fixture
def peers(tmp_path, monkeypatch):
    """peer -> seconds its first calls take; runs the stand-ins, returns (results, events)."""
    script, log = tmp_path / "peer.py", tmp_path / "events.log"
    script.write_text(STAND_IN)

    def run(warm_s: dict[str, float], timeout_s: float = 60.0):
        monkeypatch.setattr(bench_run, "PEERS", tuple(warm_s))
        monkeypatch.setattr(bench_run, "peer_command", lambda peer, rows, gate16=False: [
            sys.executable, str(script), peer, str(warm_s[peer]), str(log)])
        results = bench_run.finish_peers(bench_run.start_peers([(c, "benchmark") for c in ROWS], "/nowhere", timeout_s))
        events = [line.split() for line in log.read_text().splitlines()]
        return results, [(float(t), name, what) for t, name, what in events]
    return run


def test_timings_wait_for_every_peers_first_calls_and_never_overlap(peers):
    results, events = peers({"fla": 1.5, "tileops": 0.2})
    when = {(name, what): t for t, name, what in events}
    assert when[("fla", "start")] < when[("tileops", "warmed")] < when[("fla", "warmed")]  # side by side
    last_warmed = max(when[(p, "warmed")] for p in ("fla", "tileops"))
    assert when[("fla", "timing")] > last_warmed and when[("tileops", "timing")] > when[("fla", "timed")]
    for peer in ("fla", "tileops"):
        assert results[peer]["row"]["ms"] == 1.5
        assert results[peer]["broken"]["error"] == "RuntimeError: cannot"


def test_a_peer_past_its_time_is_stopped_and_the_other_still_times(peers):
    results, events = peers({"fla": 30.0, "tileops": 0.2}, timeout_s=3.0)
    assert results["fla"] == {"_error": {"error": "fla ran past 3 s"}}
    assert results["tileops"]["row"]["ms"] == 1.5
    assert not any(name == "fla" and what == "timing" for _, name, what in events)


def test_each_row_goes_to_the_peers_once_under_each_gate_kind():
    import json

    command = bench_run.peer_command("fla", [(ROWS[0], "benchmark"), (ROWS[0], "weak")])
    rows = json.loads(command[command.index("--cases") + 1])
    assert [(r["label"], r["gates"]) for r in rows] == [(ROWS[0].label, "benchmark"),
                                                         (f"{ROWS[0].label} [weak gates]", "weak")]

"""tileops-bench's training rows: their FLOPs, the table's title, the row reaching the peer process,
and the peers' training runners (FLA's autograd through chunk_delta_rule in BTHD or chunk_gla,
TileOPs' two ops) giving the delta rule's and GLA's gradients, checked on CPU with stand-ins for
the peers."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types
from dataclasses import asdict

import pytest
import torch

from tileops.cases import Case
from tileops.cli.bench_cases import flops
from tileops.cli.bench_run import PEER_SCRIPT, peer_command

ROW = Case("deltanet", 2, 128, 2, 2, 16, "float64", entry="train")


@pytest.fixture
def peer_row():
    """Case -> the row as the bench hands it to the peer script (its --cases)."""
    def row(case: Case) -> dict:
        command = peer_command("fla", [(case, "benchmark")])
        [one] = json.loads(command[command.index("--cases") + 1])
        return one
    return row


@pytest.fixture
def peer_bench(monkeypatch):
    """The peer script loaded from its file, as its own process loads it, with stand-ins for FLA's
    chunk_delta_rule and chunk_gla: autograd through our naive recurrences (BTHD, FLA's signatures)."""
    from tileops.reference import recurrent_delta_rule
    from tileops.reference.gla.naive import recurrent_gla

    def chunk_delta_rule(q, k, v, beta, scale=None, **kwargs):
        return recurrent_delta_rule(q, k, v, beta, scale=scale)

    def chunk_gla(q, k, v, g, scale=None, **kwargs):
        return recurrent_gla(q, k, v, g, scale=scale)

    delta, gla = types.ModuleType("fla.ops.delta_rule"), types.ModuleType("fla.ops.gla")
    delta.chunk_delta_rule, gla.chunk_gla = chunk_delta_rule, chunk_gla
    for name, module in (("fla", types.ModuleType("fla")), ("fla.ops", types.ModuleType("fla.ops")),
                         ("fla.ops.delta_rule", delta), ("fla.ops.gla", gla)):
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("_peer_bench_under_test", PEER_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_grads(x: dict) -> tuple:
    """(dq, dk, dv, dbeta) of our reference ops, BHSD, in float64."""
    from tileops.linear_attention import DeltaNetChunkBwdOp, DeltaNetChunkFwdOp

    args = (x["q"], x["k"], x["v"], x["beta"])
    saved = DeltaNetChunkFwdOp(target="reference")(*args)[1:]
    return DeltaNetChunkBwdOp(target="reference")(x["do"], *args, *saved)


def test_a_training_row_counts_forward_and_backward():
    forward = Case("deltanet", 4, 4096, 16, 16, 128)
    assert flops(Case(**{**asdict(forward), "entry": "train"})) == 3 * flops(forward) > 0


def test_the_title_says_what_the_rows_time():
    from tileops.cli.bench import render

    row = dict(label="r", ours_ms=1.0, gflop=1.0, state_mb=0.0, floor_ms=0.5, first_call_s=0.1,
               device="NVIDIA H100 80GB HBM3", date="2026-12-06")
    assert render([row], "deltanet").title == "DELTANET forward, NVIDIA H100 80GB HBM3, bf16 (2026-12-06)"
    both = render([row, dict(row, train=True)], "deltanet").title
    assert both.startswith("DELTANET forward and training step (forward + backward), NVIDIA H100")
    assert render([dict(row, train=True)], "deltanet").title.startswith("DELTANET training step (forward + backward)")


def test_rows_of_an_older_results_file_are_titled_with_the_gpu_they_ran_on_and_no_date():
    from tileops.cli.bench import render

    row = dict(label="r", ours_ms=1.0, gflop=1.0, state_mb=0.0, floor_ms=0.5, first_call_s=0.1)
    assert render([row], "gdn").title == "GDN forward, H200, bf16"


def test_the_training_row_reaches_the_peer_with_its_entry(peer_row):
    row = peer_row(ROW.on("cuda"))
    assert row["entry"] == "train" and row["label"] == "deltanet train B2xT128 H2/HV2 K16 float64"


def test_the_peer_script_loads_without_our_package():
    load = ("import sys, importlib.util as u; sys.modules['tileops'] = None; "  # any import of it fails
            f"s = u.spec_from_file_location('peer', {str(PEER_SCRIPT)!r}); m = u.module_from_spec(s); "
            "s.loader.exec_module(m); print(callable(m.train_inputs), callable(m.runner))")
    proc = subprocess.run([sys.executable, "-P", "-c", load], cwd="/tmp", capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.split() == ["True", "True"], proc.stderr[-2000:]


def test_flas_training_runner_gives_the_delta_rules_gradients(peer_bench, peer_row):
    x = peer_bench.train_inputs(peer_row(ROW), device="cpu")
    assert x["q"].shape == (2, 2, 128, 16) and x["beta"].shape == (2, 2, 128) and x["do"].dtype == torch.float64
    grads = peer_bench.fla_train_runner(x)()
    assert [g.shape for g in grads] == [(2, 128, 2, 16)] * 3 + [(2, 128, 2)]  # BTHD, as FLA returns them
    for grad, want in zip(grads, reference_grads(x)):
        assert torch.allclose(grad.transpose(1, 2), want, rtol=1e-7, atol=1e-9)
    again = peer_bench.fla_train_runner(x)()
    assert all(torch.equal(a, b) for a, b in zip(grads, again)), "repeats do not accumulate"


def test_tileops_training_runner_runs_its_forward_then_its_backward(peer_bench, peer_row):
    # In this process ``tileops.linear_attention`` is ours, whose chunk ops share the peer's API.
    x = peer_bench.train_inputs(peer_row(ROW), device="cpu")
    grads = peer_bench.tileops_train_runner(x)()
    for grad, want in zip(grads, reference_grads(x)):
        assert torch.allclose(grad, want)


GLA_ROW = Case("gla", 2, 128, 2, 2, 16, "float64", entry="train")


def gla_reference_grads(x: dict) -> tuple:
    """(dq, dk, dv, dg) of our reference GLA chunk ops, BTHD, in float64."""
    from tileops.linear_attention import GLAChunkBwdOp, GLAChunkFwdOp

    args = (x["q"], x["k"], x["v"], x["g"])
    h = GLAChunkFwdOp(target="reference")(*args).h
    return GLAChunkBwdOp(target="reference")(*args, h, x["do"], None)


def test_flas_training_runner_gives_glas_gradients(peer_bench, peer_row):
    x = peer_bench.train_inputs(peer_row(GLA_ROW), device="cpu")
    assert all(x[n].shape == (2, 128, 2, 16) for n in ("q", "k", "v", "g", "do")) and x["g"].max() < 0
    grads = peer_bench.fla_train_runner(x)()
    for grad, want in zip(grads, gla_reference_grads(x)):
        assert torch.allclose(grad, want, rtol=1e-7, atol=1e-9)


def test_tileops_training_runner_calls_glas_ops_in_the_peers_order(peer_bench, peer_row, monkeypatch):
    """The published TileOPs' GLA ops differ from ours: its forward returns (o, final_state, h) and
    its backward takes (do, dfinal_state, q, k, v, g, h); a stand-in with that API over our
    reference ops gives GLA's gradients through the runner."""
    from tileops.linear_attention import GLAChunkBwdOp, GLAChunkFwdOp

    class PeerFwd:
        def __call__(self, q, k, v, g):
            out = GLAChunkFwdOp(target="reference")(q, k, v, g)
            return out[0], out[1], out.h

    class PeerBwd:
        def __call__(self, do, dfinal_state, q, k, v, g, h):
            return GLAChunkBwdOp(target="reference")(q, k, v, g, h, do, dfinal_state)

    import tileops

    x = peer_bench.train_inputs(peer_row(GLA_ROW), device="cpu")
    expected = gla_reference_grads(x)
    peer = types.ModuleType("tileops.linear_attention")
    peer.GLAChunkFwdOp, peer.GLAChunkBwdOp = PeerFwd, PeerBwd
    monkeypatch.setitem(sys.modules, "tileops.linear_attention", peer)
    monkeypatch.setattr(tileops, "linear_attention", peer)
    grads = peer_bench.tileops_train_runner(x)()
    for grad, want in zip(grads, expected):
        assert torch.allclose(grad, want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the peer script's rows run on a CUDA device")
def test_the_peer_runner_builds_a_training_row_on_the_gpu(peer_bench, peer_row):
    row = peer_row(Case("deltanet", 1, 256, 2, 2, 64, "bfloat16", device="cuda", entry="train"))
    grads = peer_bench.runner("tileops", row)()
    torch.cuda.synchronize()
    assert [g.shape for g in grads] == [(1, 2, 256, 64)] * 3 + [(1, 2, 256)]


def test_the_peers_training_inputs_draw_the_rows_gates(peer_bench, peer_row):
    row = peer_row(GLA_ROW)
    assert peer_command("fla", [(GLA_ROW, "zero")]) != peer_command("fla", [(GLA_ROW, "benchmark")])
    zero = peer_bench.train_inputs(dict(row, gates="zero"), device="cpu")["g"]
    weak = peer_bench.train_inputs(dict(row, gates="weak"), device="cpu")["g"]
    assert torch.equal(zero, torch.zeros_like(zero))
    assert 0 < weak.abs().mean() < peer_bench.train_inputs(row, device="cpu")["g"].abs().mean() / 10

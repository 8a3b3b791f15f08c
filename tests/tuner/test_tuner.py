"""The tuner end to end on CPU: trials and winners stored, the gate, crashes and hangs survived,
the winner rule, resume, and dispatch picking up what was tuned."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _serve_first(monkeypatch, name: str):
    """Serve GDNFwdOp's reference target with test kernel ``name`` first (here and in workers)."""
    monkeypatch.setenv("TILEOPS_EXTRA_KERNELS", "tests.support.fake_kernels")
    monkeypatch.setenv("PYTHONPATH", str(REPO) + ":" + __import__("os").environ.get("PYTHONPATH", ""))
    from tests.support import fake_kernels
    import tileops.targets as targets

    monkeypatch.setitem(targets._REFERENCE_KERNELS, "GDNFwdOp", (name,) + targets._REFERENCE_KERNELS["GDNFwdOp"])
    from tileops import dispatch

    dispatch.reset()
    return fake_kernels


@pytest.fixture
def fake_kernel(monkeypatch):
    """The behaviour kernel serves GDN prefill first."""
    from tileops import dispatch

    yield _serve_first(monkeypatch, "test.gdn_behaviour")
    dispatch.reset()


def test_refused_configs_do_not_count_against_the_trial_budget(monkeypatch, tmp_path):
    from tileops import dispatch
    from tileops.db.store import TuningStore

    fakes = _serve_first(monkeypatch, "test.gdn_picky")
    try:
        db = f"sqlite:///{tmp_path / 'tuning.db'}"
        _tune(db, f"sqlite:///{tmp_path / 'optuna.db'}", trials=3)
        trials = TuningStore(db).trials(kernel=fakes.PICKY)
    finally:
        dispatch.reset()
    measured = {t.config["block"] for t in trials if t.status == "ok"}
    assert len(measured) == 3 and all(block % 2 == 0 for block in measured)
    assert all("does not tile" in t.error for t in trials if t.status == "invalid")


@pytest.mark.parametrize("trials, expected", [(4, 4), (15, 10)])
def test_a_mostly_refused_sampled_space_measures_as_many_valid_configs_as_asked(monkeypatch, tmp_path, trials,
                                                                               expected):
    from tileops import dispatch
    from tileops.db.store import TuningStore

    fakes = _serve_first(monkeypatch, "test.gdn_sparse")
    try:
        db = f"sqlite:///{tmp_path / 'tuning.db'}"
        _tune(db, f"sqlite:///{tmp_path / 'optuna.db'}", trials=trials)
        rows = TuningStore(db).trials(kernel=fakes.SPARSE)
    finally:
        dispatch.reset()
    measured = [t.config_json for t in rows if t.status == "ok"]
    assert len(measured) == len(set(measured)) == expected, "min(trials, 10 valid configs), each measured once"
    assert all(t.config["threads"] == 2 * t.config["block"] and t.config["stages"] <= 2
               for t in rows if t.status == "ok")
    assert {t.status for t in rows} <= {"ok", "invalid"}


def test_the_shipped_winner_of_the_key_is_a_candidate(monkeypatch, tmp_path):
    from dataclasses import asdict

    from tileops import dispatch
    from tileops.db.schemas import WinnerRecord
    from tileops.db.store import TuningStore
    from tileops.cases import Case
    from tileops.tuner.plan import plan

    fakes = _serve_first(monkeypatch, "test.gdn_picky")
    try:
        [(_, task, _)] = plan(Case("gdn", 1, 96, 1, 2, 16, "float32"), "cpu", "cpu")
        key = asdict(task.key)
        shipped = [  # tuned on other devices of the architecture, by another kernel source
            WinnerRecord(**dict(key, device_name="cpu b"), config={"block": 3}, time_ms=1.0, source_hash="0" * 16),
            WinnerRecord(**dict(key, device_name="cpu c"), config={"block": 6}, time_ms=1.0, source_hash="0" * 16),
            WinnerRecord(**dict(key, dim_k=32), config={"block": 4}, time_ms=1.0, source_hash="0" * 16),
        ]
        monkeypatch.setattr("tileops.dispatch.snapshot.shipped_winners", lambda arch: tuple(shipped) if arch == "cpu" else ())
        db = f"sqlite:///{tmp_path / 'tuning.db'}"
        _tune(db, f"sqlite:///{tmp_path / 'optuna.db'}", trials=2)
        trials = TuningStore(db).trials(kernel=fakes.PICKY)
    finally:
        dispatch.reset()
    assert [(t.config["block"], t.status) for t in trials] == [(2, "ok"), (6, "ok")], \
        "the default, then the shipped winner; the refused one (block 3) and another key's (block 4) left out"


def _tune(db, storage, trials=8, timeout=60.0, shape="B1xT96xH1xHV2"):
    from tileops.tuner.run import tune

    return tune(["gdn"], "cpu", [shape], 16, "float32", trials, timeout, db, storage, lambda label, n: (lambda: None))


def test_behaviour_sweep_gate_crash_hang_winner_and_dispatch(fake_kernel, tmp_path, monkeypatch):
    from tileops.db.store import TuningStore

    db = f"sqlite:///{tmp_path / 'tuning.db'}"
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    [result] = _tune(db, storage, timeout=30.0)
    assert result.kernel == fake_kernel.NAME
    trials = TuningStore(db).trials(kernel=fake_kernel.NAME)
    by_behaviour = {}
    for t in trials:
        by_behaviour.setdefault(t.config["behaviour"], set()).add(t.status)
    assert by_behaviour["wrong"] == {"wrong"}, "the gate must reject a wrong candidate"
    assert by_behaviour["crash"] == {"crashed"}, "a crashing candidate is recorded, not fatal"
    assert by_behaviour["hang"] == {"timeout"}, "a hanging candidate is killed at the timeout"
    assert by_behaviour["right"] == {"ok"}
    assert len(trials) == 8, "every config of the space measured exactly once"
    [winner] = TuningStore(db).winners(kernel=fake_kernel.NAME)
    assert winner.config == {"delay_ms": 0, "behaviour": "right"}, "the fast correct config beats the default"
    assert winner.default_ms > winner.time_ms
    assert json.loads(winner.call)["op"] == "gdn"

    # dispatch now runs the winner for a matching call
    from tileops import dispatch
    from tileops.cases import Case
    from tileops.tuner.cases import make_inputs, make_op

    monkeypatch.setenv("TILEOPS_DB", db)
    dispatch.reset()
    case = Case("gdn", 1, 96, 1, 2, 16, "float32")
    explanation = dispatch.explain(make_op(case), *make_inputs(case, seed=5))
    assert explanation.kernel == fake_kernel.NAME
    assert explanation.source == "user"
    assert explanation.config == {"delay_ms": 0, "behaviour": "right"}

    # resume: a second run measures nothing new and keeps the winner
    _tune(db, storage, timeout=30.0)
    assert len(TuningStore(db).trials(kernel=fake_kernel.NAME)) == 8
    assert TuningStore(db).winners(kernel=fake_kernel.NAME)[0].config == winner.config


def test_cpu_tune_of_the_reference_changes_what_dispatch_picks(tmp_path, monkeypatch):
    from tileops import dispatch
    from tileops.db.store import TuningStore
    from tileops.cases import Case
    from tileops.tuner.cases import make_inputs, make_op

    db = f"sqlite:///{tmp_path / 'tuning.db'}"
    monkeypatch.setenv("TILEOPS_DB", db)
    case = Case("gdn", 1, 200, 1, 2, 16, "float32")
    dispatch.reset()
    before = dispatch.explain(make_op(case), *make_inputs(case, seed=3))
    assert before.source == "default"
    [result] = _tune(db, f"sqlite:///{tmp_path / 'optuna.db'}", trials=4, shape="B1xT200xH1xHV2")
    assert result.verdict is not None and result.verdict.winner is not None
    trials = TuningStore(db).trials(kernel="reference.gdn_chunk")
    assert len(trials) == 4 and all(t.status == "ok" for t in trials)
    dispatch.reset()
    after = dispatch.explain(make_op(case), *make_inputs(case, seed=4))
    assert after.source == "user" and after.config == result.verdict.winner.config
    dispatch.reset()


def test_arch_other_than_this_machine_is_a_clear_error():
    from tileops.tuner.run import check_arch

    with pytest.raises(ValueError, match="--arch sm90 asked for, but this machine's device is cpu"):
        check_arch("sm90")


def test_winner_rule_needs_more_than_the_noise_band():
    from tileops.db.schemas import TrialRecord
    from tileops.tuner.winner import choose_winner

    key = dict(op="gdn", kernel="k", arch="cpu", device_name="cpu", dtype="float32", dim_k=16, dim_v=16,
               flags="{}", bucket_tokens=7, bucket_rows=1, source_hash="0" * 16)
    default = TrialRecord(**key, config={"a": 1}, status="ok", median_ms=10.0, noise=0.05)
    close = TrialRecord(**key, config={"a": 2}, status="ok", median_ms=9.7)
    wrong = TrialRecord(**key, config={"a": 3}, status="wrong", rel_error=1.0)
    assert choose_winner([default, close, wrong], default.config_json).winner.config == {"a": 1}
    fast = TrialRecord(**key, config={"a": 4}, status="ok", median_ms=9.0)
    tie = TrialRecord(**key, config={"a": 0}, status="ok", median_ms=9.0)
    assert choose_winner([default, close, fast, tie], default.config_json).winner.config == {"a": 0}
    # A default timed 10 ms, then 31 ms (a busy machine): a candidate 4x faster still wins, one
    # 1.8x faster does not.
    noisy = default.model_copy(update={"noise": 2.1})
    quick = TrialRecord(**key, config={"a": 5}, status="ok", median_ms=2.5)
    assert choose_winner([noisy, quick], default.config_json).winner.config == {"a": 5}
    assert choose_winner([noisy, quick.model_copy(update={"median_ms": 5.5})],
                         default.config_json).winner.config == {"a": 1}


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="compiling for sm90 needs nvcc")
def test_compile_only_builds_the_candidates_without_a_gpu(tmp_path):
    from tileops.tuner.run import tune

    built = []
    [result] = tune(["gdn"], "sm90", ["B4xT1xH2xHV4"], 64, "bfloat16", 2, 60.0, None, None,
                    lambda label, n: (lambda: built.append(label)), compile_only=True)
    assert result.kernel == "tl.gdn_decode"
    assert result.verdict is not None and len(built) == 2
    assert {t.status for t in (result.verdict.winner,)} == {"ok"}


def test_compile_only_needs_a_gpu_arch():
    from tileops.tuner.run import tune

    with pytest.raises(ValueError, match="--compile-only needs a GPU architecture"):
        tune(["gdn"], "cpu", [], None, None, 1, 1.0, None, None, lambda label, n: (lambda: None), compile_only=True)


def test_a_preset_row_keeps_the_presets_lengths():
    from tileops.tuner.presets import PRESETS, cases_for

    packed, b4 = cases_for("gdn", "sm90", ["qwen3-next:varlen16xT32768xH16xHV32", "qwen3-next:B4xT8192xH16xHV16"],
                           None, None)
    assert packed in PRESETS["qwen3-next"]["gdn"] and len(set(packed.seqlens)) > 1  # mixed, not 16 x 2048
    assert (b4.batch, b4.tokens, b4.value_heads) == (4, 8192, 16)
    with pytest.raises(ValueError, match="no gdn row 'B3xT8192xH16xHV16'"):
        cases_for("gdn", "sm90", ["qwen3-next:B3xT8192xH16xHV16"], None, None)
    with pytest.raises(ValueError, match="no preset 'qwen9'"):
        cases_for("gdn", "sm90", ["qwen9:B4xT8192xH16xHV16"], None, None)

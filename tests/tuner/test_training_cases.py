"""Training cases: a Case names DeltaNet's or GLA's training step (entry "train") and each of its two op calls;
the inference cases keep their JSON, labels and keys; the tuner plans, feeds, gates and tunes the
chunked forward and backward as two kernels with their own keys."""

from __future__ import annotations

import json
from dataclasses import asdict
from importlib import resources

import pytest
import torch

from tileops.cases import Case
from tileops.db.jsonl import read_winners
from tileops.db.models import KEY_COLUMNS
from tileops.tuner.cases import TrainingStep, make_inputs, make_op
from tileops.tuner.plan import plan

TRAIN = Case("deltanet", 4, 4096, 16, 16, 128, "bfloat16", entry="train")
SMALL = Case("deltanet", 2, 128, 2, 2, 16, "float32", entry="train")
GDN_DECODE_JSON = ('{"batch":1,"device":"cuda","dim":128,"dtype":"bfloat16","flags":[],"heads":16,"op":"gdn",'
                   '"seqlens":null,"tokens":1,"value_heads":32}')


def shipped_rows() -> list:
    folder = resources.files("tileops") / "snapshots"
    rows = []
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".jsonl"):
            rows += read_winners(item)[0]
    return rows


def test_an_inference_case_keeps_its_json_and_label():
    case = Case.from_json(GDN_DECODE_JSON)
    assert case.entry is None and case.to_json() == GDN_DECODE_JSON
    assert case.label == "gdn decode B1xT1 H16/HV32 K128 bfloat16"
    packed = Case("gdn", 1, 65, 2, 4, 32, "float32", seqlens=(1, 64))
    assert packed.label == "gdn varlen2 T65 H2/HV4 K32 float32"
    assert Case("deltanet", 4, 8192, 16, 16, 128).label == "deltanet prefill B4xT8192 H16/HV16 K128 bfloat16"
    assert "entry" not in json.loads(packed.to_json()) and Case.from_json(packed.to_json()) == packed


def test_every_shipped_row_reads_back_to_its_own_call_and_key():
    rows = shipped_rows()
    assert rows, "the snapshot ships rows"
    for row in rows:
        case = Case.from_json(row.call)
        assert case.to_json() == row.call
        [(call, task, why)] = plan(case, row.arch, row.device_name)
        assert call == case and task is not None, why
        assert asdict(task.key) == {name: getattr(row, name) for name in KEY_COLUMNS}


def test_a_training_case_round_trips_and_says_what_it_is():
    assert TRAIN.label == "deltanet train B4xT4096 H16/HV16 K128 bfloat16"
    assert json.loads(TRAIN.to_json())["entry"] == "train" and Case.from_json(TRAIN.to_json()) == TRAIN
    fwd, bwd = TRAIN.calls()
    assert (fwd.entry, bwd.entry) == ("train_fwd", "train_bwd")
    assert (fwd.op_class, bwd.op_class) == ("DeltaNetChunkFwdOp", "DeltaNetChunkBwdOp")
    assert bwd.label == "deltanet train_bwd B4xT4096 H16/HV16 K128 bfloat16"
    assert Case.from_json(bwd.to_json()) == bwd and fwd.calls() == (fwd,)
    with pytest.raises(ValueError, match="calls two ops, DeltaNetChunkFwdOp then DeltaNetChunkBwdOp"):
        TRAIN.op_class


@pytest.mark.parametrize("fields, message", [
    (dict(op="gdn", entry="train"), "gdn has no training ops; deltanet, gla has"),
    (dict(entry="step"), "case entry 'step' is not one of train, train_fwd, train_bwd"),
    (dict(entry="train", value_heads=32), "as many value heads as heads"),
    (dict(entry="train", seqlens=(64, 64)), "equal-length sequences"),
])
def test_a_training_case_the_ops_cannot_take_is_refused_in_words(fields, message):
    with pytest.raises(ValueError, match=message):
        Case(**{**asdict(TRAIN), **fields})


def test_plan_gives_the_two_training_kernels_their_own_keys_on_sm90_without_a_gpu():
    tasks = plan(TRAIN.on("cuda"), "sm90", "NVIDIA H200")
    assert [(call.entry, task.kernel.name) for call, task, _ in tasks] == [
        ("train_fwd", "tl.deltanet_chunk_fwd"), ("train_bwd", "tl.deltanet_chunk_bwd")]
    fwd, bwd = (task.key for _, task, _ in tasks)
    assert fwd != bwd and (fwd.op, fwd.arch, fwd.dtype, fwd.dim_k, fwd.dim_v) == ("deltanet", "sm90", "bfloat16", 128, 128)
    assert json.loads(fwd.flags)["mode"] == "chunk_fwd" and json.loads(bwd.flags)["mode"] == "chunk_bwd"
    assert (fwd.bucket_tokens, fwd.bucket_rows) == (bwd.bucket_tokens, bwd.bucket_rows) == (12, 6)  # 4096; 4 x 16
    assert [task.spec.entry for _, task, _ in tasks] == ["DeltaNetChunkFwdOp", "DeltaNetChunkBwdOp"]


def test_plan_of_a_training_case_on_cpu_takes_the_reference_kernels():
    names = [task.kernel.name for _, task, _ in plan(SMALL, "cpu", "cpu")]
    assert names == ["reference.deltanet_chunk_fwd", "reference.deltanet_chunk_bwd"]


def test_the_h16_preset_holds_the_training_row_and_a_row_can_name_it():
    from tileops.tuner.presets import cases_for

    assert TRAIN in cases_for("deltanet", "sm90", [], None, None)
    [row] = cases_for("deltanet", "sm90", ["h16:train-B4xT4096xH16"], None, None)
    assert row == TRAIN
    [explicit] = cases_for("deltanet", "cpu", ["train-B1xT128xH2"], 16, "float32")
    assert explicit == Case("deltanet", 1, 128, 2, 2, 16, "float32", entry="train")
    [prefill] = cases_for("deltanet", "cpu", ["cpu-small:B2xT256xH2"], None, None)
    assert prefill.entry is None, "a plain shape still names the inference row"
    with pytest.raises(ValueError, match="kda has no training ops"):
        cases_for("kda", "cpu", ["train-B1xT128xH2"], 16, "float32")


def test_training_inputs_have_the_specs_shapes_and_the_backward_runs_on_them():
    B, H, T, D = 2, 2, 128, 16
    fwd_case, bwd_case = SMALL.calls()
    q, k, v, beta = make_inputs(fwd_case, seed=3)
    assert [x.shape for x in (q, k, v)] == [(B, H, T, D)] * 3 and beta.shape == (B, H, T)
    assert all(x.dtype == torch.float32 and x.abs().sum() > 0 for x in (q, k, v, beta))
    assert torch.allclose(k.norm(dim=-1), torch.ones(B, H, T)) and 0 < beta.min() and beta.max() < 1
    args = make_inputs(bwd_case, seed=3)
    do, q2, k2, v2, beta2, S, Aw, Au, w, u = args
    assert all(torch.equal(a, b) for a, b in zip((q, k, v, beta), (q2, k2, v2, beta2))), "the same draw"
    assert do.shape == (B, H, T, D) and S.shape == (B, H, T // 64 + 1, D, D) and S.dtype == torch.float32
    assert Aw.shape == Au.shape == (B, H, T, 64) and w.shape == (B, H, T, D) and u.shape == (B, H, T, D)
    assert not torch.equal(make_inputs(bwd_case, seed=4)[0], do), "fresh inputs per seed"
    grads = make_op(bwd_case)(*args)
    assert [g.shape for g in grads] == [x.shape for x in (q, k, v, beta)]

    # the gradients are those of the delta rule: autograd through the naive recurrence (BTHD)
    from tileops.reference import recurrent_delta_rule

    do64, *inputs64 = (x.double() for x in (do, q, k, v, beta))
    leaves = [x.transpose(1, 2).detach().requires_grad_() for x in inputs64]
    o, _ = recurrent_delta_rule(*leaves, scale=1.0)
    want = torch.autograd.grad(o, leaves, do64.transpose(1, 2))
    for grad, expected in zip(grads, want):
        assert torch.allclose(grad.double(), expected.transpose(1, 2), rtol=1e-4, atol=1e-4)


def test_the_training_step_is_its_forward_then_its_backward():
    step = make_op(SMALL)
    assert isinstance(step, TrainingStep)
    grads = step(*make_inputs(SMALL, seed=5))
    split = make_op(SMALL.calls()[1])(*make_inputs(SMALL.calls()[1], seed=5))
    assert all(torch.equal(a, b) for a, b in zip(grads, split))


def test_float64_training_inputs_come_from_the_reference():
    bwd = SMALL.calls()[1]
    args = make_inputs(bwd, seed=1, dtype=torch.float64)
    assert all(x.dtype == torch.float64 for x in args)
    assert torch.allclose(args[5], make_inputs(bwd, seed=1)[5].double(), atol=1e-4)


@pytest.mark.parametrize("op", ["deltanet", "gla"])
@pytest.mark.parametrize("entry", ["train_fwd", "train_bwd"])
def test_a_training_candidate_passes_the_gate_with_every_output_checked(op, entry):
    from tileops.tuner.evaluate import Job, evaluate, gate_case

    case = Case(op, 1, 192, 2, 2, 16, "float32", entry=entry)
    assert gate_case(Case("deltanet", 8, 4096, 2, 2, 16, entry=entry)).tokens % 64 == 0
    [(_, task, _)] = plan(case, "cpu", "cpu")
    outcome = evaluate(Job(task.kernel.name, task.kernel.default(task.spec).to_json(), case.to_json(), seed=2))
    assert outcome.status == "ok" and outcome.rel_error < 1e-4 and outcome.median_ms > 0


def test_the_gate_checks_every_output_of_a_tuple():
    from tileops.tuner.gate import as_outputs, worst_error

    a, b = torch.randn(4, 8), torch.randn(4, 8)
    assert worst_error((a, b), (a, b)) == 0
    assert worst_error((a, 1.1 * b), (a, b)) == pytest.approx(0.1)
    assert worst_error((a,), (a, b)) == float("inf"), "a missing output fails the gate"
    assert len(as_outputs(a)) == 1 and as_outputs([a, b])[1] is b
    from tileops.linear_attention.gla import GLAChunkResult

    assert as_outputs(GLAChunkResult(a, b, 2 * a))[2].equal(2 * a), "GLA's h is checked with o and the final state"


def test_the_cpu_tuner_tunes_both_training_kernels_and_stores_their_calls(tmp_path):
    from tileops.db.store import TuningStore
    from tileops.tuner.run import tune
    from tileops.tuner.warm import compile_winner
    from tests.tuner.test_tuned_default_agree import check

    db = f"sqlite:///{tmp_path / 'tuning.db'}"
    labels = []
    results = tune(["deltanet"], "cpu", ["train-B1xT128xH2"], 16, "float32", 2, 120.0, db,
                   f"sqlite:///{tmp_path / 'o.db'}", lambda label, n: (lambda: labels.append(label)))
    assert [r.kernel for r in results] == ["reference.deltanet_chunk_fwd", "reference.deltanet_chunk_bwd"]
    assert all(r.verdict is not None and r.verdict.winner is not None for r in results)
    assert labels == [f"deltanet {e} B1xT128 H2/HV2 K16 float32" for e in ("train_fwd", "train_bwd")]
    store = TuningStore(db, readonly=True)
    assert all(t.status == "ok" and t.rel_error < 1e-4 for t in store.trials())
    winners = store.winners()
    assert sorted(Case.from_json(w.call).entry for w in winners) == ["train_bwd", "train_fwd"]
    for record in winners:
        check(record)
        compile_winner(record)


GLA_SMALL = Case("gla", 2, 128, 2, 2, 16, "float32", entry="train")


def test_glas_training_step_is_its_chunked_ops_with_their_own_keys():
    assert Case("gla", 4, 4096, 16, 16, 128, "bfloat16", entry="train") in cases_for_gla_h16()
    fwd, bwd = GLA_SMALL.calls()
    assert (fwd.op_class, bwd.op_class) == ("GLAChunkFwdOp", "GLAChunkBwdOp")
    tasks = plan(Case("gla", 2, 128, 2, 2, 64, "bfloat16", device="cuda", entry="train"), "sm90", "NVIDIA H200")
    assert [(call.entry, task.kernel.name) for call, task, _ in tasks] == [
        ("train_fwd", "tl.gla_chunk_fwd"), ("train_bwd", "tl.gla_chunk_bwd")]
    assert [task.kernel.name for _, task, _ in plan(GLA_SMALL, "cpu", "cpu")] == [
        "reference.gla_chunk_fwd", "reference.gla_chunk_bwd"]


def cases_for_gla_h16():
    from tileops.tuner.presets import cases_for

    return cases_for("gla", "sm90", [], None, None)


def test_glas_training_inputs_are_bthd_and_the_step_gives_the_recurrences_gradients():
    from tileops.reference.gla.naive import recurrent_gla

    B, T, H, D = 2, 128, 2, 16
    fwd_case, bwd_case = GLA_SMALL.calls()
    q, k, v, g = make_inputs(fwd_case, seed=3)
    assert [x.shape for x in (q, k, v, g)] == [(B, T, H, D)] * 4 and g.dtype == torch.float32
    assert torch.allclose(k.norm(dim=-1), torch.ones(B, T, H)) and g.max() < 0 and g.abs().sum() > 0
    args = make_inputs(bwd_case, seed=3)
    q2, k2, v2, g2, h, do, dht = args
    assert all(torch.equal(a, b) for a, b in zip((q, k, v, g), (q2, k2, v2, g2))), "the same draw"
    assert h.shape == (B, T // 64 + 1, H, D, D) and do.shape == (B, T, H, D) and dht is None
    step = make_op(GLA_SMALL)
    assert isinstance(step, TrainingStep)
    grads = step(*make_inputs(GLA_SMALL, seed=3))
    split = make_op(bwd_case)(*args)
    assert all(torch.equal(a, b) for a, b in zip(grads, split))
    leaves = [x.double().detach().requires_grad_() for x in (q, k, v, g)]
    o, _ = recurrent_gla(*leaves, scale=D ** -0.5)
    want = torch.autograd.grad(o, leaves, do.double())
    for grad, expected in zip(grads, want):
        assert torch.allclose(grad.double(), expected, rtol=1e-4, atol=1e-4)


def test_glas_training_inputs_draw_the_gates_asked_for():
    """A training row timed under other gates gets them (GLA's peers' speed can depend on them)."""
    draws = {kind: make_inputs(GLA_SMALL, seed=3, gates=kind)[4] for kind in ("benchmark", "weak", "zero")}
    assert torch.equal(draws["zero"], torch.zeros_like(draws["zero"]))
    assert 0 < draws["weak"].abs().mean() < draws["benchmark"].abs().mean() / 10
    fwd_case, _ = GLA_SMALL.calls()
    assert torch.equal(make_inputs(fwd_case, seed=3, gates="weak")[3], draws["weak"])

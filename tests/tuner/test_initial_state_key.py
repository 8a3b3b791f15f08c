"""Calls with and without an initial state share their tuning key: a winner tuned with a state
serves the README's ``op(q, k, v, g, beta)`` prefill, from the user database and the snapshot."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest
import torch

from tileops.cases import Case
from tileops.dispatch.key import key_for
from tileops.dispatch.snapshot import shipped_winners
from tileops.tuner.cases import make_inputs, make_op



def state_position(case: Case) -> int:
    """Where initial_state is among the forward arguments: after q, k, v and the op's g and beta."""
    return 4 if case.op in ("deltanet", "gla") else 5


def without_state(case: Case, inputs: tuple) -> tuple:
    at = state_position(case)
    return inputs[:at] + (None,) + inputs[at + 1:]


@pytest.mark.parametrize("case", [Case("gdn", 2, 96, 1, 2, 16, "float32"), Case("gdn", 4, 1, 1, 2, 16, "float32"),
                                  Case("kda", 1, 40, 2, 2, 16, "float32"), Case("gla", 1, 40, 2, 2, 16, "float32"),
                                  Case("deltanet", 1, 40, 2, 2, 16, "float32", seqlens=(10, 30))])
def test_the_key_is_the_same_with_and_without_a_state(case):
    inputs = make_inputs(case, seed=1)
    with_state, _ = make_op(case).describe(*inputs)
    bare, _ = make_op(case).describe(*without_state(case, inputs))
    assert with_state.flag("has_initial_state") is True and bare.flag("has_initial_state") is False
    assert with_state.program_facts != bare.program_facts, "the compile cache still tells them apart"
    assert key_for("k", with_state) == key_for("k", bare)
    assert "has_initial_state" not in json.loads(key_for("k", bare).flags)


def test_every_shipped_row_is_the_key_of_its_call_without_a_state():
    rows = shipped_winners("sm90")
    assert rows
    for row in rows:
        case = Case.from_json(row.call).on("cpu")
        inputs = make_inputs(case.smallest(), seed=0)
        if case.entry is None:  # the chunked training ops take no initial state
            inputs = without_state(case, inputs)
        spec, _ = make_op(case).describe(*inputs)
        spec = replace(spec, device=torch.device("cuda", 0), arch="sm90", device_name=row.device_name,
                       batch=case.batch if not case.seqlens else len(case.seqlens),
                       tokens=sum(case.seqlens) if case.seqlens else case.tokens)
        key = asdict(key_for(row.kernel, spec))
        assert key == {name: getattr(row, name) for name in key}, row.call


def test_a_prefill_without_a_state_runs_the_winner_tuned_with_one(tmp_path, monkeypatch):
    from tileops import dispatch
    from tileops.tuner.run import tune

    db = f"sqlite:///{tmp_path / 'tuning.db'}"
    monkeypatch.setenv("TILEOPS_DB", db)
    case = Case("gdn", 1, 200, 1, 2, 16, "float32")
    op, inputs = make_op(case), without_state(case, make_inputs(case, seed=3))
    dispatch.reset()
    assert dispatch.explain(op, *inputs).source == "default"
    [result] = tune(["gdn"], "cpu", ["B1xT200xH1xHV2"], 16, "float32", 4, 60.0, db,
                    f"sqlite:///{tmp_path / 'optuna.db'}", lambda label, n: (lambda: None))
    winner = result.verdict.winner
    assert winner is not None
    dispatch.reset()
    try:
        explanation = dispatch.explain(op, *inputs)
        assert explanation.source == "user" and explanation.config == winner.config
        assert "has_initial_state" not in explanation.key.flags
        o, final = op(*inputs)
        reference = make_op(case, target="reference")(*make_inputs(case, seed=3, dtype=torch.float64)[:state_position(case)])
        assert torch.allclose(o.double(), reference[0], rtol=1e-4, atol=1e-4)
    finally:
        dispatch.reset()

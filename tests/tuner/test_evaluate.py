"""The candidate evaluator draws a key's timed inputs once: every trial of a key times the same
call on the same arguments, and a big call's take seconds to draw on the host."""

from __future__ import annotations

from tileops.cases import Case
from tileops.tuner import evaluate as ev
from tileops.tuner.plan import plan


def test_a_keys_trials_draw_its_timed_inputs_once_and_a_new_key_replaces_them(monkeypatch):
    drawn = []
    real = ev.make_inputs

    def counting(case, seed, *args, **kwargs):
        drawn.append((case.tokens, seed))
        return real(case, seed, *args, **kwargs)

    monkeypatch.setattr(ev, "make_inputs", counting)
    monkeypatch.setattr(ev, "_arguments", {})
    first, second = Case("gla", 2, 900, 2, 2, 16, "float32"), Case("gla", 2, 1000, 2, 2, 16, "float32")
    for case in (first, first, second):
        [(_, task, _)] = plan(case, "cpu", "cpu")
        outcome = ev.evaluate(ev.Job(task.kernel.name, task.kernel.default(task.spec).to_json(), case.to_json(), seed=5))
        assert outcome.status == "ok" and outcome.median_ms > 0
    timed = [d for d in drawn if d[0] in (900, 1000)]
    assert timed == [(900, 6), (1000, 6)]  # the gate's smaller call (700 tokens) is drawn every trial
    assert [key[0] for key in ev._arguments] == [second.to_json()]

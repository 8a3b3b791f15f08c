"""The cold-start probe: a fresh process times tileops' import, the op's construction and its
first call apart, and a call that fails says why."""

from __future__ import annotations

import pytest

from tileops.cases import Case
from tileops.cli.cold_start import COLD, PHASES, WARM, first_call_seconds, measure_cold_start


def test_a_fresh_process_reports_each_phase():
    phases = first_call_seconds(Case("deltanet", 1, 40, 2, 2, 16, "float32").to_json())
    assert set(phases) == set(PHASES)
    assert all(phases[name] > 0 for name in PHASES)
    assert phases["import_s"] > phases["construct_s"]  # the import loads dispatch; construction is lazy


def test_a_failing_first_call_raises_with_the_child_error():
    bad = Case("deltanet", 1, 40, 2, 2, 16, "float32").to_json().replace('"cpu"', '"nowhere"')
    with pytest.raises(RuntimeError, match="first call failed"):
        first_call_seconds(bad)


def test_each_measurement_comes_as_soon_as_it_is_taken():
    case = Case("deltanet", 1, 40, 2, 2, 16, "float32")
    runs = measure_cold_start([case])
    label, name, phases = next(runs)  # the cold run, before anything is warmed
    assert (label, name) == (case.label, COLD) and set(phases) == set(PHASES)
    label, name, phases = next(runs)
    assert (label, name) == (case.label, WARM) and all(phases[p] > 0 for p in PHASES)
    assert next(runs, None) is None

"""The program comparison behind ``bench/tools/carry_snapshot.py``: a bounds test TVM's simplifier
writes twice reads as once, and nothing else is taken for equal."""

from __future__ import annotations

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "bench" / "tools" / "program_identity.py"


def load_canonical():
    spec = importlib.util.spec_from_file_location("program_identity", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.canonical


def test_a_bounds_test_written_twice_reads_as_once():
    canonical = load_canonical()
    bound = "((((((int)blockIdx.y) * 64) + (i >> 2)) + (((int)threadIdx.x) >> 4)) < tokens)"
    once, twice = f"if ({bound}) {{", f"if (({bound} && {bound})) {{"
    assert canonical(twice) == canonical(once) == once


def test_different_conditions_stay_different():
    canonical = load_canonical()
    assert canonical("if (((i < n) && (j < n))) {") == "if (((i < n) && (j < n))) {"
    assert canonical("if (((i < n) && (i < m))) {") != canonical("if ((i < n)) {")
    assert canonical("x = ((a) && (a)) || (b);") == "x = (a) || (b);"

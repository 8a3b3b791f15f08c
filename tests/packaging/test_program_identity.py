"""The program comparison behind ``bench/tools/carry_snapshot.py``: a bounds test TVM's simplifier
writes twice reads as once, and nothing else is taken for equal; a stored config reaches each tree
with the knobs that tree declares."""

from __future__ import annotations

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "bench" / "tools" / "program_identity.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("program_identity", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_canonical():
    return load_tool().canonical


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


def test_a_stored_config_keeps_the_knobs_the_tree_declares():
    from tileops.kernels.registry import get_kernel

    kernel = get_kernel("tl.kda_prefill")
    stored = {"block_v": 64, "chunk_size": 64, "num_stages": 1, "walk_issue": "serial"}
    assert load_tool().tree_config(kernel, stored) == {"chunk_size": 64, "num_stages": 1}
    assert load_tool().tree_config(kernel, {"num_stages": 1}) == dict(kernel.config_model().model_dump(), num_stages=1)

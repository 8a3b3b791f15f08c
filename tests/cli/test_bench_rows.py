"""tileops-bench's rows: every family has its preset's rows, and --rows keeps one kind of them."""

import pytest
import typer

from tileops.cli.bench import bench_rows


@pytest.mark.parametrize("op,decode,prefill", [("gdn", 3, 4), ("kda", 1, 3), ("deltanet", 1, 2), ("gla", 1, 2)])
def test_each_family_has_its_rows_and_rows_filters_them(op, decode, prefill):
    every = bench_rows(op)
    assert {c.op for c in every} == {op} and all(c.device == "cuda" for c in every)
    assert len(bench_rows(op, "decode")) == decode and len(bench_rows(op, "prefill")) == prefill
    assert all(c.tokens == 1 and not c.seqlens for c in bench_rows(op, "decode"))
    assert len(every) == decode + prefill


def test_kdas_rows_are_the_ones_its_speed_bars_name():
    labels = [c.label for c in bench_rows("kda")]
    assert any("B4xT8192 H32" in label for label in labels) and any("varlen64" in label for label in labels)
    packed = next(c for c in bench_rows("kda") if c.seqlens)
    assert min(packed.seqlens) >= 128 and max(packed.seqlens) <= 1024


def test_an_unknown_row_kind_is_refused_by_name():
    with pytest.raises(typer.BadParameter, match="--rows"):
        bench_rows("gdn", "both")

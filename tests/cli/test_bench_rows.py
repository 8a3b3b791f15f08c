"""tileops-bench's rows: every family has its preset's rows, and --rows keeps one kind of them."""

import pytest
import typer

from tileops.cli.bench import bench_rows


@pytest.mark.parametrize("op,decode,prefill,train", [("gdn", 3, 4, 0), ("kda", 1, 4, 0), ("deltanet", 1, 2, 1),
                                                     ("gla", 1, 2, 1)])
def test_each_family_has_its_rows_and_rows_filters_them(op, decode, prefill, train):
    every = bench_rows(op)
    assert {c.op for c in every} == {op} and all(c.device == "cuda" for c in every)
    assert len(bench_rows(op, "decode")) == decode and len(bench_rows(op, "prefill")) == prefill
    assert all(c.tokens == 1 and not c.seqlens for c in bench_rows(op, "decode"))
    assert all(c.entry is None for c in bench_rows(op, "decode") + bench_rows(op, "prefill"))
    assert [c.entry for c in bench_rows(op, "train")] == ["train"] * train
    assert len(every) == decode + prefill + train


def test_kdas_rows_are_the_ones_its_speed_bars_name():
    labels = [c.label for c in bench_rows("kda")]
    assert any("B4xT8192 H32" in label for label in labels) and any("varlen64" in label for label in labels)
    packed = next(c for c in bench_rows("kda") if c.seqlens)
    assert min(packed.seqlens) >= 128 and max(packed.seqlens) <= 1024


def test_an_unknown_row_kind_is_refused_by_name():
    with pytest.raises(typer.BadParameter, match="--rows"):
        bench_rows("gdn", "both")


def test_gate_kinds_draw_the_decays_their_names_say(rng):
    import torch

    from tileops.cases import GATE_KINDS, MAMBA_RATES, log_decays
    from tileops.cases import Case
    from tileops.tuner.cases import make_inputs

    def randn(shape):
        return torch.randn(*shape, generator=rng, dtype=torch.float64)

    def rand(shape):
        return torch.rand(*shape, generator=rng, dtype=torch.float64)
    shape = (2, 4000, 16)
    draws = {kind: log_decays(kind, shape, randn, rand, 8.0) for kind in GATE_KINDS}
    assert all(d.shape == shape and (d <= 0).all() for d in draws.values())
    assert -0.12 < draws["benchmark"].mean() < -0.08  # about e^-0.1 a token
    assert -1.1e-3 < draws["weak"].mean() < -0.9e-3 and draws["weak"].min() >= -1.5e-3
    assert (draws["zero"] == 0).all()
    assert draws["steep"].max() <= -8 and draws["steep"].min() >= -16
    rates = -draws["mamba"].mean((0, 1)) / (torch.nn.functional.softplus(randn((10 ** 6,))).mean() / 0.6931)
    assert torch.allclose(rates[[0, -1]], torch.tensor(MAMBA_RATES, dtype=torch.float64), rtol=0.05)
    assert (rates[1:] < rates[:-1]).all()  # one rate per head, log-spaced down the heads
    # The tuner's and the benchmark's inputs draw their gates from it, the benchmark's by default.
    case = Case("gdn", 1, 300, 2, 4, 16, "float32")
    assert torch.equal(make_inputs(case, seed=3)[3], make_inputs(case, seed=3, gates="benchmark")[3])
    assert (make_inputs(case, seed=3, gates="zero")[3] == 0).all()
    with pytest.raises(ValueError, match="gate kind 'strong' is not one of benchmark, weak, mamba, zero, steep"):
        log_decays("strong", shape, randn, rand, 8.0)


def test_the_benchmark_refuses_an_unknown_gate_kind_by_name():
    from typer.testing import CliRunner

    from tileops.cli.bench import app

    for gates in ("strong", "weak,strong"):
        result = CliRunner().invoke(app, ["--gates", gates], env={"COLUMNS": "200"})
        assert result.exit_code != 0
        assert "--gates takes benchmark, weak, mamba, zero, steep (several with commas), not 'strong'" in result.output

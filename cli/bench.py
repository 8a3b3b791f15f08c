"""`tileops-bench`: our ops side by side with the peers, and the host overhead of dispatch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from tileops.cases import GATE_KINDS
from tileops.cli import wide_console

app = typer.Typer(add_completion=False, help="Benchmark tileops against its peers.")
console = wide_console()


def _ratio(ours: Optional[float], peer: Optional[float]) -> str:
    return "-" if not ours or not peer else f"{peer / ours:.2f}x"


def timed(rows: list[dict]) -> str:
    """What the rows time, for titles: the forward, the training step (forward + backward), or both."""
    train = [bool(r.get("train")) for r in rows]
    if train and all(train):
        return "training step (forward + backward)"
    return "forward and training step (forward + backward)" if any(train) else "forward"


def measured_on(rows: list[dict]) -> str:
    """The GPU and date the rows were timed on, for titles (rows of an older results.json name
    neither: their date is unknown and their GPU was the H200)."""
    devices = sorted({r.get("device", "H200") for r in rows})
    dates = sorted({r["date"] for r in rows if r.get("date")})
    return f"{' / '.join(devices)}, bf16" + (f" ({' / '.join(dates)})" if dates else "")


def render(rows: list[dict], op: str = "gdn") -> Table:
    """The side-by-side table: ms, throughput, floor, and our speed relative to each peer."""
    table = Table(title=f"{op.upper()} {timed(rows)}, {measured_on(rows)}")
    for name in ("row", "ours ms", "throughput", "floor ms", "FLA ms", "TileOPs ms", "vs FLA", "vs TileOPs",
                 "first call s"):
        table.add_column(name)
    for r in rows:
        ours = r["ours_ms"]
        rate = (f"{r['gflop'] / ours:.0f} TFLOP/s" if r["gflop"] else f"{r['state_mb'] / ours:.0f} GB/s")
        table.add_row(r["label"], f"{ours:.4f}", rate, f"{r['floor_ms']:.4f}",
                      "-" if r.get("fla_ms") is None else f"{r['fla_ms']:.4f}",
                      "-" if r.get("tileops_ms") is None else f"{r['tileops_ms']:.4f}",
                      _ratio(ours, r.get("fla_ms")), _ratio(ours, r.get("tileops_ms")), f"{r['first_call_s']:.2f}")
    return table


def plot(rows: list[dict], path: Path, op: str = "gdn") -> None:
    """Bar chart of ms per row for ours and each peer, with the floor marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["label"].replace(" H16", "\nH16") for r in rows]
    series = [("ours", "ours_ms"), ("FLA 0.6.0", "fla_ms"), ("TileOPs 0.1.0", "tileops_ms")]
    fig, ax = plt.subplots(figsize=(12, 5))
    width = 0.27
    for i, (name, key) in enumerate(series):
        ax.bar([x + (i - 1) * width for x in range(len(rows))], [r.get(key) or 0 for r in rows], width, label=name)
    ax.scatter(range(len(rows)), [r["floor_ms"] for r in rows], marker="_", s=400, color="black", label="floor")
    ax.set_yscale("log")
    ax.set_ylabel("ms (log)")
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.legend()
    ax.set_title(f"{op.upper()} {timed(rows)}, {measured_on(rows)}: lower is better")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


ROW_KINDS = ("all", "prefill", "decode", "train")


def row_kind(case) -> str:
    """prefill (varlen included), decode or train: which of ``ROW_KINDS`` a row is."""
    if case.entry == "train":
        return "train"
    return "decode" if case.tokens == 1 and not case.seqlens else "prefill"


def bench_rows(op: str, kind: str = "all") -> list:
    """The benchmark rows of ``op``: all, or only its prefill, decode or training-step rows."""
    from tileops.cli.bench_cases import bench_cases

    if kind not in ROW_KINDS:
        raise typer.BadParameter(f"--rows takes {', '.join(ROW_KINDS)}, not {kind!r}", param_hint="--rows")
    rows = list(bench_cases(op))
    return rows if kind == "all" else [c for c in rows if row_kind(c) == kind]


@app.command()
def main_command(
    op: str = typer.Option("gdn", help="Op family to benchmark: gdn, kda, deltanet or gla."),
    rows_kind: str = typer.Option("all", "--rows", help="all, prefill, decode or train (training step) rows."),
    gates: str = typer.Option("benchmark", help="Gates the rows draw, one kind or several with commas (each row "
                                                "timed under each): benchmark (about e^-0.1 a token), weak "
                                                "(about -1e-3), mamba (Mamba's initialisation), zero or steep (8 "
                                                "to 16 a token)."),
    peers_path: Optional[str] = typer.Option(None, envvar="ANCHORS_PYTHONPATH",
                                             help="PYTHONPATH holding the peers (fla, tileops 0.1.0)."),
    gate16: bool = typer.Option(False, "--gate16", help="KDA's and GLA's gate in the input dtype, as the "
                                                        "specification has it (default: fp32, as models compute it)."),
    out: Path = typer.Option(Path("bench-out"), help="Folder for results.json and the PNG plot."),
    overhead: bool = typer.Option(False, help="Only print the host µs that dispatch adds per call."),
    replot: Optional[Path] = typer.Option(None, help="Render the table and plot of an earlier results.json."),
    peer_timeout: float = typer.Option(900.0, help="Seconds each peer may run: its first calls (compiles, run beside the other peer's), then its timings (alone)."),
    cold_start: bool = typer.Option(False, help="Only measure first-call seconds: with an empty compile "
                                                "cache, then after `tileops-db warm` (the first row of each "
                                                "kind --rows names)."),
) -> None:
    """Time ours and the peers on the op's benchmark rows; print a table, write JSON and a plot."""
    kinds = tuple(kind.strip() for kind in gates.split(","))
    unknown = [kind for kind in kinds if kind not in GATE_KINDS]
    if unknown:
        raise typer.BadParameter(f"--gates takes {', '.join(GATE_KINDS)} (several with commas), not "
                                 f"{', '.join(map(repr, unknown))}", param_hint="--gates")
    if cold_start:
        from tileops.cli.cold_start import measure_cold_start

        kinds = ("prefill", "decode") if rows_kind == "all" else (rows_kind,)
        firsts = [bench_rows(op, kind)[0] for kind in kinds]
        for label, name, phases in measure_cold_start(firsts):
            console.print(f"{label}, {name}: import {phases['import_s']:.3f} s, construct "
                          f"{phases['construct_s']:.3f} s, first call {phases['first_call_s']:.3f} s; "
                          f"{sum(phases.values()):.3f} s in all", soft_wrap=True, highlight=False)
        return
    if overhead:
        from tileops.cli.overhead import measure

        for name, value in measure().items():
            console.print(f"{name}: {value:.2f} µs")
        return
    if replot is not None:
        rows = json.loads(replot.read_text())
    else:
        import torch

        if not torch.cuda.is_available():
            console.print("[red]error:[/red] tileops-bench times GPU kernels and this machine has no CUDA "
                          "device; run it on a GPU machine (--overhead and --replot work anywhere)",
                          soft_wrap=True, highlight=False)
            raise typer.Exit(1)
        from tileops.cli.bench_run import bench

        rows = bench(bench_rows(op, rows_kind), peers_path, peer_timeout, kinds, gate16)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    console.print(render(rows, op))
    try:
        plot(rows, out / f"{op}.png", op)
        console.print(f"wrote {out / 'results.json'} and {out / (op + '.png')}")
    except ImportError:
        console.print(f"wrote {out / 'results.json'}; matplotlib is absent here: "
                      f"`tileops-bench --replot {out / 'results.json'}` renders the plot elsewhere")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()

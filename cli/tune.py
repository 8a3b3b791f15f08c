"""`tileops-tune`: tune kernel configs for the current device and store the winners."""

from __future__ import annotations

from typing import List, Optional

import typer
from rich.markup import escape

from tileops.cli import printable, wide_console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

app = typer.Typer(add_completion=False, help="Tune linear-attention kernels and store the winners.",
                  pretty_exceptions_enable=False)
console = wide_console()


def _fmt(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render_summary(rows: list[dict]) -> Table:
    """The end-of-run table: one line per key."""
    table = Table(title="tuning winners")
    for name in ("key", "kernel", "default ms", "winner ms", "speedup", "rel. error", "config", "note"):
        table.add_column(name, overflow="fold")
    for r in rows:
        table.add_row(r["key"], r["kernel"], _fmt(r["default_ms"], ".4g"), _fmt(r["winner_ms"], ".4g"),
                      _fmt(r["speedup"], ".2f") + ("x" if r["speedup"] else ""), _fmt(r["rel_error"], ".1e"),
                      r["config"], r["note"])
    return table


@app.command()
def tune(
    arch: Optional[str] = typer.Option(None, help="Architecture to tune (sm90, cpu...); default: this machine's."),
    op: str = typer.Option("gdn", help="Op family: gdn, kda, gla, deltanet, or all."),
    dtype: Optional[str] = typer.Option(None, help="bfloat16, float16 or float32 (default: the preset's)."),
    width: Optional[int] = typer.Option(None, help="State width K = V (default: the preset's)."),
    shapes: List[str] = typer.Option([], help="Preset name (qwen3-next, kimi-linear, cpu-small), one of its "
                                          "rows (qwen3-next:varlen16xT32768xH16xHV32, with the preset's own "
                                          "lengths) or a shape such as B4xT8192xH16xHV32 (train-B4xT4096xH16: "
                                          "the training step's forward and backward); repeat for several."),
    trials: int = typer.Option(20, min=1, help="Trials per key (at most the size of the config space)."),
    timeout: float = typer.Option(300.0, help="Seconds one candidate may take before it is killed."),
    db: Optional[str] = typer.Option(None, help="Tuning database: path or SQLAlchemy URL (default $TILEOPS_DB "
                                                "or ~/.cache/tileops/tuning.db)."),
    storage: Optional[str] = typer.Option(None, help="Optuna storage URL shared by workers (default: beside "
                                                     "the tuning database)."),
    compile_only: bool = typer.Option(False, help="Only compile the candidates this run would measure for "
                                                  "--arch into the compile cache (needs nvcc, not the GPU)."),
) -> None:
    """Run the studies and print the winners."""
    from tileops.tuner.run import OPS, summary_rows, tune as run_tuning

    ops = list(OPS) if op == "all" else [op]
    unknown = [o for o in ops if o not in OPS]
    if unknown:
        raise typer.BadParameter(f"unknown op {unknown[0]!r}; choose from {', '.join(OPS)} or all", param_hint="--op")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        def on_key(label: str, total: int):
            task = progress.add_task(label, total=total)
            return lambda: progress.advance(task)

        try:
            results = run_tuning(ops, arch, shapes, width, dtype, trials, timeout, db, storage, on_key, compile_only)
        except ValueError as err:
            console.print(f"[red]error:[/red] {err}")
            raise typer.Exit(2)
        except KeyboardInterrupt:
            console.print("interrupted: the run is recorded as interrupted; winners of finished keys are kept",
                          soft_wrap=True, highlight=False)
            raise typer.Exit(130) from None
    if compile_only:
        import tilelang

        built = sum(1 for r in results if r.verdict is not None)
        console.print(f"compiled the candidates of {built} keys for {arch} into {tilelang.env.TILELANG_CACHE_DIR}")
        return
    console.print(render_summary(summary_rows(results)))


def main() -> None:
    """Console-script entry point: database faults, a full disk and Ctrl-C end in one line; usage
    errors are Typer's own (its standalone mode, whichever click it carries)."""
    from sqlalchemy.exc import SQLAlchemyError

    from tileops.db.errors import StoreError

    try:
        app()
    except (StoreError, SQLAlchemyError, OSError) as error:
        console.print(f"[red]error:[/red] {escape(printable(one_line(error)))}", soft_wrap=True, highlight=False)
        raise SystemExit(1) from None


def one_line(error: BaseException) -> str:
    """An exception as one line: a driver error without SQLAlchemy's statement and link."""
    from sqlalchemy.exc import DBAPIError

    if isinstance(error, DBAPIError):
        error = error.orig
    return " ".join(str(error).split()) or type(error).__name__


if __name__ == "__main__":
    main()

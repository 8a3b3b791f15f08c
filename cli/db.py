"""tileops-db: inspect and maintain the tuning database.

Every command takes ``--db`` (a SQLAlchemy URL or a SQLite path; default $TILEOPS_DB, else
~/.cache/tileops/tuning.db). Failures print one line on stderr and exit with status 1; so does
``import`` when it refused any row.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from enum import Enum
from pathlib import Path
from typing import Annotated, NoReturn, Optional, Union

import typer
from alembic.util import CommandError
from tileops.cli import printable, wide_console
from rich.markup import escape
from rich.progress import Progress, TimeElapsedColumn
from rich.table import Table
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from tileops.db import migrate
from tileops.db.engine import display_url, make_engine, resolve_url, sqlite_path
from tileops.db.errors import StoreError
from tileops.db.jsonl import diff_winners, export_winners, read_numbered_winners, read_winners, winner_line
from tileops.db.rows import MalformedRow
from tileops.db.schemas import WinnerRecord, record_key
from tileops.db.store import TuningStore
from tileops.db.tables import WINNER_SOURCES

app = typer.Typer(name="tileops-db", help="Inspect and maintain the tileops tuning database.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
out = wide_console()
err = wide_console(stderr=True)

Db = Annotated[Optional[str], typer.Option(
    "--db", help="SQLAlchemy URL or SQLite path (default: $TILEOPS_DB, else ~/.cache/tileops/tuning.db).")]
OpFilter = Annotated[Optional[str], typer.Option(help="Only this op (deltanet, gdn, kda, gla).")]
ArchFilter = Annotated[Optional[str], typer.Option(help="Only this architecture (sm90, cpu, ...).")]
DtypeFilter = Annotated[Optional[str], typer.Option(help="Only this dtype (bfloat16, float16, ...).")]
KernelFilter = Annotated[Optional[str], typer.Option(help="Only this kernel (e.g. tl.gdn_prefill).")]
SourceChoice = Enum("SourceChoice", {name: name for name in WINNER_SOURCES}, type=str)

# What a command may fail with for reasons outside the program: printed as one line, exit 1.
EXPECTED_ERRORS = (StoreError, SQLAlchemyError, CommandError, OSError, ValueError, KeyError)


def print_error(message: str) -> None:
    """``error: message`` on stderr, on one line."""
    err.print(f"[red]error:[/red] {escape(printable(message))}", highlight=False, soft_wrap=True)


def fail(message: str) -> NoReturn:
    """Inside a command: print the error and exit with status 1."""
    print_error(message)
    raise typer.Exit(1)


def describe(error: Exception) -> str:
    """An exception as one line: a driver error without SQLAlchemy's statement and link."""
    if isinstance(error, DBAPIError):
        error = error.orig
    if isinstance(error, KeyError) and error.args:
        return str(error.args[0])
    return " ".join(str(error).split()) or type(error).__name__


def check_all(rows: list[WinnerRecord]) -> list[tuple[WinnerRecord, Optional[str]]]:
    """Each row with why dispatch cannot use it (None: it can)."""
    # Imported here: the kernel registry brings in torch, which only these commands need.
    from tileops.dispatch.usable import usable

    return [(row, usable(row)[1]) for row in rows]


KEY_HEADERS = ("key", "flags", "device")


def key_cells(record: Union[WinnerRecord, MalformedRow]) -> list[str]:
    """The tuning key of a row as table cells under ``KEY_HEADERS``, escaped for the terminal:
    op, kernel, arch, dtype, KxV and buckets in one cell, so that a table fits 80 columns."""
    key = record.key if isinstance(record, MalformedRow) else record.model_dump()
    cells = [f"{key['op']} {key['kernel']} {key['arch']} {key['dtype']} {key['dim_k']}x{key['dim_v']} "
             f"t{key['bucket_tokens']} r{key['bucket_rows']}", key["flags"], key["device_name"]]
    return [escape(printable(cell)) for cell in cells]


def key_table(title: str, *extra: str) -> Table:
    """A table whose first columns are the tuning key."""
    table = Table(title=escape(printable(title)), title_justify="left")
    for header in (*KEY_HEADERS, *extra):
        table.add_column(header, overflow="fold")
    return table


def text_cell(value: object) -> str:
    """Any database text as a table cell: control characters escaped, no rich markup."""
    return escape(printable(str(value)))


def ms(value: Optional[float]) -> str:
    """A time in milliseconds for a table cell."""
    return "-" if value is None else f"{value:.4g}"


def revision_of(url: str) -> Optional[str]:
    """The schema revision of the database at ``url`` (None: no schema)."""
    engine = make_engine(url)
    try:
        return migrate.current_revision(engine)
    finally:
        engine.dispose()


@app.command()
def upgrade(db: Db = None, revision: Annotated[str, typer.Option(help="Target revision.")] = "head") -> None:
    """Create the tables or migrate them to the newest schema (or to --revision)."""
    url = resolve_url(db)
    migrate.upgrade(url, revision)
    out.print(f"{escape(display_url(url))}: schema at revision {revision_of(url)}")


@app.command()
def downgrade(revision: Annotated[str, typer.Option(help="Target revision; 'base' drops every table.")],
              db: Db = None) -> None:
    """Migrate the schema down to --revision."""
    url = resolve_url(db)
    migrate.downgrade(url, revision)
    out.print(f"{escape(display_url(url))}: schema at revision {revision_of(url) or 'base'}")


@app.command()
def show(db: Db = None, op: OpFilter = None, arch: ArchFilter = None, dtype: DtypeFilter = None,
         kernel: KernelFilter = None,
         stale_only: Annotated[bool, typer.Option(help="Only rows dispatch would ignore.")] = False,
         limit: Annotated[int, typer.Option(min=1, help="Show at most this many rows.")] = 100,
         offset: Annotated[int, typer.Option(min=0, help="Skip this many rows first (the next page).")] = 0,
         ) -> None:
    """List the winners with their timings and whether dispatch can still use them, a page at a time."""
    filters = dict(op=op, arch=arch, dtype=dtype, kernel=kernel)
    with TuningStore(db, readonly=True) as store:
        total = store.count_winners(**filters)
        rows, malformed = store.winner_rows(**filters) if stale_only else store.winner_rows(
            limit=limit, offset=offset, **filters)
    checked = [*check_all(rows), *((row, row.reason) for row in malformed)]
    if stale_only:
        checked = [(row, problem) for row, problem in checked if problem]
        total = len(checked)
        checked = checked[offset:offset + limit]
    if not checked:
        out.print("no winners match" if offset == 0 else f"no winners past the first {offset}")
        return
    shown = f"{offset + 1}-{offset + len(checked)} of {total}"
    more = f"; --offset {offset + len(checked)} for more" if offset + len(checked) < total else ""
    table = key_table(f"{total} winners (rows {shown}{more})", "config", "ms", "speedup", "source", "status")
    for row, problem in checked:
        status = "[green]ok[/green]" if problem is None else f"[red]{text_cell(problem)}[/red]"
        if isinstance(row, MalformedRow):
            table.add_row(*key_cells(row), "-", "-", "-", "-", status)
            continue
        speedup = "-" if row.speedup is None else f"{row.speedup:.2f}x"
        table.add_row(*key_cells(row), text_cell(row.config_json), ms(row.time_ms), speedup, row.source, status)
    out.print(table)


@app.command()
def export(out_file: Annotated[str, typer.Option("--out", help="The JSONL file to write; - for standard output.")],
           db: Db = None, op: OpFilter = None, arch: ArchFilter = None, dtype: DtypeFilter = None,
           kernel: KernelFilter = None) -> None:
    """Write winners as JSONL (sorted, one row a line: diffs well in git)."""
    with TuningStore(db, readonly=True) as store:
        rows, malformed = store.winner_rows(op=op, arch=arch, dtype=dtype, kernel=kernel)
    to_stdout = out_file == "-"
    count = export_winners(rows, sys.stdout if to_stdout else Path(out_file))
    report = err if to_stdout else out
    report.print(f"exported {count} winners to {'standard output' if to_stdout else escape(out_file)}"
                 + (f" ({len(malformed)} malformed rows left out; tileops-db prune removes them)" if malformed else ""))


@app.command("import")
def import_(file: Annotated[Path, typer.Argument(help="A JSONL file of winners.")], db: Db = None,
            source: Annotated[Optional[SourceChoice], typer.Option(
                help="Record the rows with this source (default: each row's own).")] = None) -> None:
    """Add winners from JSONL, replacing rows of the same key; exit 1 if any row is refused."""
    numbered, rejects = read_numbered_winners(file)
    with TuningStore(db) as store:
        good = []
        for (line, _), (record, problem) in zip(numbered, check_all([r for _, r in numbered]), strict=True):
            if problem:
                rejects.append((line, problem))
            else:
                good.append(record if source is None else record.model_copy(update={"source": source.value}))
        store.put_winners(good)
        out.print(f"imported {len(good)} winners into {escape(display_url(store.url))}")
    if rejects:
        table = Table(title=f"{len(rejects)} rows refused", title_justify="left")
        table.add_column("line", justify="right")
        table.add_column("reason", overflow="fold")
        for line, reason in sorted(rejects):
            table.add_row(str(line), text_cell(reason))
        out.print(table)
        raise typer.Exit(1)


def load_winners(source: str) -> list[WinnerRecord]:
    """The winners of a .jsonl file or of a database (URL or path); bad lines are warned about."""
    if source.endswith(".jsonl"):
        records, rejects = read_winners(Path(source))
        for line, reason in rejects:
            err.print(f"[yellow]warning:[/yellow] {text_cell(source)} line {line} skipped: {text_cell(reason)}")
        return records
    with TuningStore(source, readonly=True) as store:
        return store.winners()


@app.command()
def diff(a: Annotated[str, typer.Argument(help="Database URL/path or .jsonl file.")],
         b: Annotated[str, typer.Argument(help="Database URL/path or .jsonl file.")]) -> None:
    """Compare two sets of winners by tuning key: added in B, removed from A, changed; exit 1 when
    they differ."""
    changes = diff_winners(load_winners(a), load_winners(b))
    if not changes:
        out.print("no differences")
        return
    for title, rows in (("added", changes.added), ("removed", changes.removed)):
        if rows:
            table = key_table(f"{title} ({len(rows)})", "config", "ms", "source")
            for row in rows:
                table.add_row(*key_cells(row), text_cell(row.config_json), ms(row.time_ms), row.source)
            out.print(table)
    if changes.changed:
        table = key_table(f"changed ({len(changes.changed)})", "what changed")
        for old, new in changes.changed:
            table.add_row(*key_cells(new), text_cell(changed_fields(old, new)))
        out.print(table)
    raise typer.Exit(1)  # like diff(1): the sets differ


def changed_fields(old: WinnerRecord, new: WinnerRecord) -> str:
    """``field: old -> new`` for every field that differs."""
    before, after = json.loads(winner_line(old)), json.loads(winner_line(new))
    return "; ".join(f"{name}: {json.dumps(before[name])} -> {json.dumps(after[name])}"
                     for name in sorted(before) if before[name] != after[name])


@app.command()
def prune(db: Db = None,
          dry_run: Annotated[bool, typer.Option(help="Only list what would be deleted.")] = False) -> None:
    """Delete winners dispatch can no longer use (unknown kernel, invalid config, stale source,
    malformed row)."""
    with TuningStore(db, readonly=dry_run) as store:
        rows, malformed = store.winner_rows()
        doomed = [(row, problem) for row, problem in check_all(rows) if problem]
        doomed += [(row, row.reason) for row in malformed]
        if not doomed:
            out.print("nothing to prune")
            return
        table = key_table(f"{len(doomed)} unusable winners", "why")
        for row, problem in doomed:
            table.add_row(*key_cells(row), text_cell(problem))
        out.print(table)
        if dry_run:
            out.print(f"would delete {len(doomed)} winners (dry run)")
        else:
            deleted = store.delete_winners(ids=[row.id for row, _ in doomed])
            out.print(f"deleted {deleted} winners")


@app.command()
def warm(db: Db = None,
         arch: Annotated[Optional[str], typer.Option(
             help="Compile for this architecture instead of this machine's device (e.g. sm90 on a CPU "
                  "machine with nvcc), to fill a compile cache that travels to the GPU machine.")] = None,
         shipped: Annotated[bool, typer.Option(
             help="Also the shipped snapshot's winners for the keys the database lacks.")] = True,
         presets: Annotated[bool, typer.Option(
             help="Also the GPU presets' calls that no winner serves, on their kernels' defaults.")] = True,
         prune: Annotated[bool, typer.Option(
             help="First remove the compiled programs kept for other versions of the kernels or "
                  "TileLang (they are never loaded by this one).")] = False,
         op: OpFilter = None,
         jobs: Annotated[Optional[int], typer.Option(
             min=1, help="Compile this many winners at once, each in its own process (default: one "
                         "a CPU core; 1 compiles in this process).")] = None,
         ) -> None:
    """Compile this device's winners (the database's, then the shipped snapshot's for the keys the
    database lacks) and the presets' calls that none serves (their defaults) ahead of time, so the
    first op call does not wait."""
    from tileops.device import current_arch, current_device_name
    from tileops.kernels.launch.compiled import prune_other_versions

    if prune:
        out.print(f"removed the kept programs of {prune_other_versions()} other versions")

    try:
        from tileops.tuner.warm import compile_winner, preset_defaults
    except ImportError as error:
        fail(f"cannot warm: tileops.tuner.warm is not available ({describe(error)})")
    from tileops.dispatch.snapshot import shipped_winners

    arch = arch or current_arch()
    path = sqlite_path(resolve_url(db))
    if path is not None and not path.exists():  # a fresh install: the shipped snapshot alone
        out.print(f"no tuning database at {path}: warming the shipped snapshot only")
        rows = []
    else:
        with TuningStore(db, readonly=True) as store:
            rows = store.winners(arch=arch, op=op)
    # The shipped snapshot serves every key the database does not: its winners are warmed too.
    own_keys = {record_key(row) for row in rows}
    rows += [row for row in shipped_winners(arch)
             if shipped and record_key(row) not in own_keys and op in (None, row.op)]
    usable = [row for row, problem in check_all(rows) if problem is None]
    here = current_device_name() if arch == current_arch() else f"an {arch} device"
    defaults = preset_defaults(arch, here, op, usable) if presets else []
    if not usable and not defaults:
        out.print(f"no usable winners for {arch} ({len(rows)} rows in all, database and shipped snapshot)")
        return
    unusable = len(rows) - len(usable)
    usable += defaults
    what = f"{len(usable) - len(defaults)} {arch} winners" + (
        f" and {len(defaults)} preset calls' defaults" if defaults else "")
    jobs = min(jobs or os.cpu_count() or 1, len(usable))
    with Progress(*Progress.get_default_columns(), TimeElapsedColumn(), console=out) as progress:
        task = progress.add_task(f"compiling {what}" + (f", {jobs} at once" if jobs > 1 else ""), total=len(usable))
        failures = []
        for row, reason in compiled_rows(compile_winner, usable, jobs):
            progress.advance(task)
            if reason is not None:
                failures.append((row, reason))
    out.print(f"compiled {len(usable) - len(failures)} of {len(usable)} winners"
              + (f" and preset defaults ({len(defaults)})" if defaults else "") + f" for {arch}"
              + (f" ({unusable} unusable rows skipped)" if unusable else ""))
    if failures:
        out.print(f"{len(failures)} failed:")
        for row, reason in failures:  # one line each, whole: an error is read, not tabulated
            out.print(f"  {' '.join(key_cells(row))}: {text_cell(reason)}", soft_wrap=True, highlight=False)
        raise typer.Exit(1)


def compiled_rows(compile_winner, rows: list, jobs: int):
    """Yield (row, None) for each row compiled, (row, "Error: why") for each that failed, as they
    finish. ``jobs`` > 1 compiles in that many fresh processes (TileLang's lowering holds the
    interpreter, so threads would compile one at a time); a process that dies breaks the pool, and
    the rows not yet compiled are reported failed with that cause."""
    def reason(error: BaseException) -> str:  # every failing row is reported, the others still compile
        return f"{type(error).__name__}: {describe(error)}"

    if jobs == 1:
        for row in rows:
            try:
                compile_winner(row)
            except Exception as error:
                yield row, reason(error)
            else:
                yield row, None
        return
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(compile_winner, row): row for row in rows}
        for future in as_completed(futures):
            error = future.exception()
            yield futures[future], None if error is None else reason(error)


def main() -> None:
    """The ``tileops-db`` console script."""
    try:
        app(prog_name="tileops-db")
    except EXPECTED_ERRORS as error:
        print_error(describe(error))
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()

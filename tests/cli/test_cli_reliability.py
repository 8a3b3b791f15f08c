"""tileops-db against hostile or large databases: malformed rows listed and pruned, database text
never drives the terminal, pages of rows, JSONL to standard output, 80 columns in a pipe, and
warm-up that refuses a recorded call too large to allocate."""

import json
import os
import subprocess
import sys

import pytest
from sqlalchemy import update
from tests.support.db import REPO, make_winner, run_cli

from tileops.db.models import Winner
from tileops.db.store import TuningStore
from tileops.tuner.warm import MAX_WARM_BYTES, call_bytes, checked_case
from tileops.cases import Case


def fill(url, *records):
    with TuningStore(url) as store:
        return store.put_winners(records)


def corrupt(url, row_id, **columns):
    with TuningStore(url) as store, store.engine.begin() as connection:
        connection.execute(update(Winner).where(Winner.id == row_id).values(**columns))


def test_a_malformed_row_is_listed_as_invalid_and_pruned(sqlite_url, tiny_kernel):
    good, bad = fill(sqlite_url, make_winner(source_hash=tiny_kernel.source_hash),
                     make_winner(bucket_tokens=3, source_hash=tiny_kernel.source_hash))
    corrupt(sqlite_url, bad, config_json="not json")
    shown = run_cli("show", "--db", sqlite_url, with_tiny_kernel=True)
    assert shown.returncode == 0, shown.stderr
    assert "2 winners" in shown.stdout and "malformed row" in shown.stdout and "ok" in shown.stdout
    pruned = run_cli("prune", "--db", sqlite_url, with_tiny_kernel=True)
    assert pruned.returncode == 0, pruned.stderr
    assert "deleted 1 winners" in pruned.stdout
    with TuningStore(sqlite_url, readonly=True) as store:
        assert [row.id for row in store.winners()] == [good]


def test_database_text_is_escaped(sqlite_url, tiny_kernel):
    fill(sqlite_url, make_winner(device_name="evil\x1b]0;pwned\x07\x1b[2J", source_hash=tiny_kernel.source_hash))
    shown = run_cli("show", "--db", sqlite_url, with_tiny_kernel=True)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "\\x1b]0;pwned\\x07" in shown.stdout.replace("\n", "").replace("│", "").replace(" ", "")


def test_show_pages_through_many_rows(sqlite_url, tiny_kernel):
    fill(sqlite_url, *(make_winner(bucket_rows=r, source_hash=tiny_kernel.source_hash) for r in range(7)))
    first = run_cli("show", "--db", sqlite_url, "--limit", "3", with_tiny_kernel=True)
    assert "7 winners (rows 1-3 of 7; --offset 3 for more)" in first.stdout
    assert "t12 r2" in first.stdout and "t12 r3" not in first.stdout
    last = run_cli("show", "--db", sqlite_url, "--limit", "3", "--offset", "6", with_tiny_kernel=True)
    assert "rows 7-7 of 7)" in last.stdout and "t12 r6" in last.stdout


def test_export_to_standard_output(sqlite_url, tiny_kernel):
    fill(sqlite_url, make_winner(), make_winner(bucket_tokens=3))
    exported = run_cli("export", "--db", sqlite_url, "--out", "-")
    assert exported.returncode == 0, exported.stderr
    lines = exported.stdout.splitlines()
    assert len(lines) == 2 and {json.loads(line)["bucket_tokens"] for line in lines} == {3, 12}
    assert "exported 2 winners to standard output" in exported.stderr


def test_a_pipe_without_columns_gets_80_columns(sqlite_url, tiny_kernel):
    fill(sqlite_url, make_winner(source_hash=tiny_kernel.source_hash, device_name="NVIDIA H200 " * 6))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = str(REPO)
    code = "import tests.support.db as h; h.isolate_registry(h.make_tiny_kernel()); import tileops.cli.db as c; c.main()"
    piped = subprocess.run([sys.executable, "-c", code, "show", "--db", sqlite_url], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert max(len(line) for line in piped.stdout.splitlines()) <= 80
    wide = run_cli("show", "--db", sqlite_url, with_tiny_kernel=True)  # COLUMNS=250
    assert max(len(line) for line in wide.stdout.splitlines()) > 80


def test_warm_refuses_a_recorded_call_too_large_to_allocate():
    huge = Case("gdn", 1, 64, 4096, 4096, 128, "bfloat16")
    assert call_bytes(huge) > MAX_WARM_BYTES
    row = make_winner(op="gdn", dim_k=128, dim_v=128, dtype="bfloat16", call=huge.to_json())
    with pytest.raises(ValueError, match="would allocate .* MiB to compile, more than the 256 MiB"):
        checked_case(row)
    mismatched = make_winner(dim_k=64, dim_v=64, call=Case("gdn", 1, 64, 2, 2, 128, "bfloat16").to_json())
    with pytest.raises(ValueError, match="is not of its key"):
        checked_case(mismatched)
    fine = Case("gdn", 4, 8192, 16, 32, 128, "bfloat16")
    assert checked_case(make_winner(call=fine.to_json())) == fine.smallest()


def test_tune_and_bench_fail_in_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="100")
    tune = subprocess.run([sys.executable, "-m", "tileops.cli.tune", "--arch", "cpu", "--db",
                           str(tmp_path / "file" / "sub" / "t.db")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert tune.returncode == 1
    lines = [line for line in (tune.stdout + tune.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: cannot create the folder"), lines
    import torch

    if torch.cuda.is_available():
        return  # the benchmark itself would run: its refusal is for machines without a GPU
    bench = subprocess.run([sys.executable, "-m", "tileops.cli.bench"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=120)
    assert bench.returncode == 1 and "Traceback" not in bench.stderr
    assert "no CUDA device" in bench.stdout + bench.stderr


@pytest.mark.parametrize("args, words", [(["--op", "nope"], "unknown op 'nope'"),
                                         (["--trials", "x"], "valid integer")])
def test_tune_usage_errors_say_what_is_wrong_without_a_traceback(args, words):
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    tune = subprocess.run([sys.executable, "-m", "tileops.cli.tune", "--arch", "cpu", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert tune.returncode == 2 and "Traceback" not in tune.stderr
    assert words in tune.stderr

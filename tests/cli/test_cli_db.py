"""tileops-db driven as a real subprocess: upgrade, show, export, import, diff and prune; warm
in-process with a stand-in compiler (the real one needs a GPU)."""

import shutil
import sys
import types

import pytest
from tests.support.db import TINY_KERNEL_NAME, make_winner, run_cli
from typer.testing import CliRunner

from tileops.db.store import TuningStore


def fill(url: str, *records) -> None:
    with TuningStore(url) as store:
        store.put_winners(records)


def head_revision() -> str:
    """The newest revision among the migration scripts."""
    from alembic.script import ScriptDirectory

    from tileops.db.migrate import alembic_config

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def test_upgrade_downgrade_and_the_old_schema_message(tmp_path):
    path = tmp_path / "fresh.db"
    upgraded = run_cli("upgrade", "--db", str(path))
    assert upgraded.returncode == 0, upgraded.stderr
    assert upgraded.stdout.strip() == f"sqlite:///{path}: schema at revision {head_revision()}"
    down = run_cli("downgrade", "--revision", "base", "--db", str(path))
    assert down.returncode == 0, down.stderr
    assert down.stdout.strip() == f"sqlite:///{path}: schema at revision base"
    shown = run_cli("show", "--db", str(path))
    assert shown.returncode == 1
    assert shown.stderr.strip().splitlines() == [
        f"error: sqlite:///{path} has no tileops tables; create them with: tileops-db upgrade --db sqlite:///{path}"]


def test_show_marks_rows_dispatch_would_ignore(sqlite_url, tiny_kernel):
    fill(sqlite_url, make_winner(source_hash=tiny_kernel.source_hash),
         make_winner(bucket_tokens=3, source_hash="0000000000000000"))
    shown = run_cli("show", "--db", sqlite_url, with_tiny_kernel=True)
    assert shown.returncode == 0, shown.stderr
    assert "2 winners" in shown.stdout and "stale: tuned on kernel source 0000000000000000" in shown.stdout
    assert '{"block":64,"stages":2}' in shown.stdout and "1.50x" in shown.stdout
    stale = run_cli("show", "--db", sqlite_url, "--stale-only", "--op", "gdn", with_tiny_kernel=True)
    assert "1 winners" in stale.stdout and "t3 r6" in stale.stdout and "t12 r6" not in stale.stdout


def test_export_import_export_gives_the_same_bytes(tmp_path, tiny_kernel):
    source, target = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    fill(source, *(make_winner(bucket_tokens=b, source=s, source_hash=tiny_kernel.source_hash)
                   for b, s in ((12, "tuned"), (3, "user"), (7, "shipped"))))
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    exported = run_cli("export", "--db", source, "--out", str(first))
    assert exported.returncode == 0 and "exported 3 winners" in exported.stdout
    imported = run_cli("import", str(first), "--db", target, with_tiny_kernel=True)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert "imported 3 winners" in imported.stdout
    assert run_cli("export", "--db", target, "--out", str(second)).returncode == 0
    assert second.read_bytes() == first.read_bytes()


def test_import_refuses_bad_rows_with_reasons_and_keeps_the_good_ones(tmp_path, tiny_kernel):
    good = make_winner(source_hash=tiny_kernel.source_hash)
    lines = [good.model_dump_json(),
             make_winner(bucket_rows=1, source_hash="0000000000000000").model_dump_json(),
             make_winner(bucket_rows=2, kernel="gone.kernel").model_dump_json(),
             '{"op": "gdn"']
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    target = str(tmp_path / "target.db")
    result = run_cli("import", str(path), "--db", target, "--source", "user", with_tiny_kernel=True)
    assert result.returncode == 1
    assert "imported 1 winners" in result.stdout and "3 rows refused" in result.stdout
    assert "stale: tuned on kernel source 0000000000000000" in result.stdout
    assert "unknown kernel: no kernel named 'gone.kernel'" in result.stdout
    assert "not JSON" in result.stdout
    with TuningStore(target, readonly=True) as store:
        assert [(r.bucket_rows, r.source) for r in store.winners()] == [(6, "user")]


def test_diff_between_a_file_and_a_database(tmp_path):
    base = [make_winner(bucket_tokens=b) for b in (1, 2, 3)]
    path = tmp_path / "snapshot.jsonl"
    assert run_cli("diff", str(path), str(path)).returncode == 1  # the file does not exist yet
    from tileops.db.jsonl import export_winners

    export_winners(base, path)
    db = str(tmp_path / "tuned.db")
    fill(db, base[0], base[1].model_copy(update={"time_ms": 0.125}), make_winner(bucket_tokens=9))
    result = run_cli("diff", str(path), db)
    assert result.returncode == 1, result.stderr  # the sets differ, as diff(1) says it
    out = result.stdout
    assert "added (1)" in out and "removed (1)" in out and "changed (1)" in out
    assert "time_ms: 0.5 -> 0.125" in out
    same = run_cli("diff", str(path), str(path))
    assert same.returncode == 0 and same.stdout.strip() == "no differences"


def test_prune_deletes_only_what_dispatch_cannot_use(sqlite_url, tiny_kernel):
    fill(sqlite_url, make_winner(source_hash=tiny_kernel.source_hash),
         make_winner(bucket_tokens=3, source_hash="0000000000000000"),
         make_winner(bucket_tokens=4, kernel="gone.kernel"),
         make_winner(bucket_tokens=5, config={"block": 7}, source_hash=tiny_kernel.source_hash))
    dry = run_cli("prune", "--db", sqlite_url, "--dry-run", with_tiny_kernel=True)
    assert dry.returncode == 0, dry.stderr
    assert "3 unusable winners" in dry.stdout and "would delete 3 winners" in dry.stdout
    assert len(TuningStore(sqlite_url, readonly=True).winners()) == 4
    pruned = run_cli("prune", "--db", sqlite_url, with_tiny_kernel=True)
    assert pruned.returncode == 0 and "deleted 3 winners" in pruned.stdout
    with TuningStore(sqlite_url, readonly=True) as store:
        assert [r.bucket_tokens for r in store.winners()] == [12]


def warm_with(monkeypatch, compile_winner, *args: str, preset_defaults=lambda arch, device, op, winners: []):
    """``tileops-db warm --jobs 1 ARGS`` in-process, with ``compile_winner`` standing in for the
    compiler (and ``preset_defaults`` for the presets' defaults: none unless given)."""
    from tileops.cli.db import app

    monkeypatch.setitem(sys.modules, "tileops.tuner.warm",
                        types.SimpleNamespace(compile_winner=compile_winner, preset_defaults=preset_defaults))
    return CliRunner().invoke(app, ["warm", "--jobs", "1", *args], env={"COLUMNS": "250"})


def test_warm_compiles_this_devices_usable_winners_and_reports_failures(sqlite_url, tiny_kernel, monkeypatch):
    compiled = []

    def compile_winner(record):
        if record.bucket_tokens == 2:
            raise RuntimeError("nvcc exploded")
        compiled.append(record.bucket_tokens)

    current = tiny_kernel.source_hash
    fill(sqlite_url, *(make_winner(arch="cpu", bucket_tokens=b, source_hash=current) for b in (1, 2, 3)),
         make_winner(arch="cpu", bucket_tokens=4), make_winner(arch="sm90", source_hash=current))
    result = warm_with(monkeypatch, compile_winner, "--db", sqlite_url)
    assert result.exit_code == 1
    assert compiled == [1, 3]
    assert "compiled 2 of 3 winners for cpu (1 unusable rows skipped)" in result.output
    assert "RuntimeError: nvcc exploded" in result.output


def test_warm_builds_winners_for_a_gate_and_a_decode_beta_in_either_dtype(monkeypatch):
    """A KDA or GLA winner is built for its gate in fp32 and in the input dtype (the prefill's first
    pass and the decode step read each as it comes, so each is a program), a delta-rule decode
    winner (GDN's, KDA's) for its beta in fp32 and in the input dtype, GDN's also for its gate per
    head in either, any other once."""
    import tileops.tuner.warm as warm
    from tileops.dispatch.snapshot import shipped_winners

    built = []

    class Recorder:
        def validate_config(self, config, spec):
            return config

        def build(self, config, spec):
            built.append((spec.op, spec.mode, spec.flag("gate_dtype"), spec.flag("beta_dtype")))

    monkeypatch.setattr(warm, "get_kernel", lambda name: Recorder())
    rows = {(row.op, row.kernel): row for row in shipped_winners("sm90")}
    for key in (("deltanet", "tl.deltanet_prefill"), ("kda", "tl.kda_decode"), ("gla", "tl.gla_decode"),
                ("gdn", "tl.gdn_decode")):
        warm.compile_winner(rows[key])
    assert built == [("deltanet", "prefill", None, None),
                     ("kda", "decode", "float32", None), ("kda", "decode", "float32", "float16"),
                     ("kda", "decode", None, None), ("kda", "decode", None, "float16"),
                     ("gla", "decode", "float32", None), ("gla", "decode", None, None),
                     ("gdn", "decode", "float32", None), ("gdn", "decode", "float32", "bfloat16"),
                     ("gdn", "decode", None, None), ("gdn", "decode", None, "bfloat16")]


def test_warm_builds_the_presets_calls_that_no_winner_serves_on_their_defaults():
    """GLA's preset on sm90: its decode key has shipped winners, its prefill and training calls none;
    those get their kernel's default for the call's own lengths (a cut call's differs)."""
    from tileops.dispatch.snapshot import shipped_winners
    from tileops.kernels.registry import get_kernel
    from tileops.tuner.warm import preset_defaults

    shipped = [row for row in shipped_winners("sm90") if row.op == "gla"]
    records = preset_defaults("sm90", "NVIDIA H200", "gla", shipped)
    assert [(r.kernel, r.bucket_tokens) for r in records] == [
        ("tl.gla_prefill", 13), ("tl.gla_prefill", 15), ("tl.gla_chunk_fwd", 12), ("tl.gla_chunk_bwd", 12)]
    assert [r.config["num_stages"] for r in records[:2]] == [2, 1]  # B1×T32768 is cut: one stage
    assert all(r.source_hash == get_kernel(r.kernel).source_hash and r.call for r in records)
    uncovered = preset_defaults("sm90", "NVIDIA H200", "gla", [])
    assert [r.kernel for r in uncovered] == ["tl.gla_prefill", "tl.gla_prefill", "tl.gla_decode", "tl.gla_chunk_fwd",
                                             "tl.gla_chunk_bwd"]
    assert preset_defaults("cpu", "cpu", "gla", []) == []


def test_warm_compiles_the_presets_defaults_after_the_winners(sqlite_url, tiny_kernel, monkeypatch):
    compiled = []
    fill(sqlite_url, make_winner(arch="cpu", source_hash=tiny_kernel.source_hash))
    default = make_winner(arch="cpu", bucket_tokens=9, source_hash=tiny_kernel.source_hash)
    result = warm_with(monkeypatch, lambda record: compiled.append(record.bucket_tokens), "--db", sqlite_url,
                       preset_defaults=lambda arch, device, op, winners: [default] if len(winners) == 1 else [])
    assert result.exit_code == 0, result.output
    assert compiled == [12, 9]
    assert "compiled 2 of 2 winners and preset defaults (1) for cpu" in result.output
    skipped = warm_with(monkeypatch, lambda record: compiled.append(record.bucket_tokens), "--db", sqlite_url,
                        "--no-presets", preset_defaults=lambda *a: [default])
    assert skipped.exit_code == 0 and compiled == [12, 9, 12]


def test_warm_also_compiles_shipped_winners_for_keys_the_database_lacks(sqlite_url, tiny_kernel, monkeypatch):
    import tileops.dispatch.snapshot
    from tileops import dispatch

    compiled = []
    current = tiny_kernel.source_hash
    fill(sqlite_url, make_winner(arch="cpu", bucket_tokens=1, source_hash=current, time_ms=1.0))
    shipped = (make_winner(arch="cpu", bucket_tokens=1, source_hash=current, time_ms=2.0),  # the database's key
               make_winner(arch="cpu", bucket_tokens=5, source_hash=current, time_ms=3.0))
    monkeypatch.setattr(dispatch.snapshot, "shipped_winners", lambda arch: shipped if arch == "cpu" else ())
    result = warm_with(monkeypatch, lambda record: compiled.append(record.time_ms), "--db", sqlite_url)
    assert result.exit_code == 0, result.output
    assert compiled == [1.0, 3.0]
    assert "compiled 2 of 2 winners for cpu" in result.output
    compiled.clear()
    result = warm_with(monkeypatch, lambda record: compiled.append(record.time_ms), "--db", sqlite_url, "--no-shipped")
    assert result.exit_code == 0, result.output
    assert compiled == [1.0] and "compiled 1 of 1 winners for cpu" in result.output


def test_warm_prunes_the_programs_of_other_versions_when_asked(sqlite_url, tiny_kernel, monkeypatch, tmp_path):
    from tileops.kernels.launch import compiled

    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "cache"))
    older = compiled.version_folder().parent / "older-version"
    (older / "some-program").mkdir(parents=True)
    fill(sqlite_url, make_winner(arch="cpu", source_hash=tiny_kernel.source_hash))
    result = warm_with(monkeypatch, lambda record: None, "--db", sqlite_url)
    assert result.exit_code == 0 and older.exists()
    result = warm_with(monkeypatch, lambda record: None, "--db", sqlite_url, "--prune")
    assert result.exit_code == 0, result.output
    assert "removed the kept programs of 1 other versions" in result.output and not older.exists()


def test_warm_for_another_arch_picks_that_archs_winners(sqlite_url, tiny_kernel, monkeypatch):
    compiled = []
    current = tiny_kernel.source_hash
    fill(sqlite_url, make_winner(arch="cpu", source_hash=current), make_winner(arch="sm90", source_hash=current))
    result = warm_with(monkeypatch, lambda record: compiled.append(record.arch), "--db", sqlite_url, "--arch", "sm90")
    assert result.exit_code == 0, result.output
    assert compiled[0] == "sm90" and "cpu" not in compiled


def test_warm_takes_one_ops_winners_when_asked(sqlite_url, tiny_kernel, monkeypatch):
    compiled = []
    current = tiny_kernel.source_hash
    fill(sqlite_url, make_winner(arch="cpu", op="gdn", source_hash=current),
         make_winner(arch="cpu", op="kda", bucket_tokens=3, source_hash=current))
    result = warm_with(monkeypatch, lambda record: compiled.append(record.op), "--db", sqlite_url, "--op", "kda")
    assert result.exit_code == 0, result.output
    assert compiled == ["kda"] and "compiled 1 of 1 winners for cpu" in result.output


def test_warm_in_several_processes_reports_each_rows_failure(sqlite_url, tiny_kernel):
    # The real compiler in two fresh processes: rows without a recorded call fail there, each
    # reported on its own line, and the command fails.
    fill(sqlite_url, *(make_winner(bucket_tokens=b, source_hash=tiny_kernel.source_hash) for b in (3, 12)))
    result = run_cli("warm", "--db", sqlite_url, "--arch", "sm90", "--jobs", "2", "--no-presets", with_tiny_kernel=True,
                     timeout=300)
    assert result.returncode == 1, result.stderr
    assert "2 at once" in result.stdout and "compiled 0 of 2 winners for sm90" in result.stdout
    assert result.stdout.count(f"ValueError: winner {TINY_KERNEL_NAME} has no recorded call to compile for") == 2


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is needed to compile for sm_90a")
def test_warm_compiles_the_shipped_sm90_winners_on_a_machine_without_a_gpu(tmp_path):
    from tileops.dispatch.snapshot import shipped_winners

    shipped = shipped_winners("sm90")
    if not shipped:
        pytest.skip("no sm90 snapshot ships")
    # Every shipped row's programs from an empty cache: 57 rows took over 15 minutes on a slow
    # 2-core machine, two at a time.
    result = run_cli("warm", "--db", str(tmp_path / "empty.db"), "--arch", "sm90", "--no-presets", timeout=2700)
    assert result.returncode == 0, result.stderr
    assert f"compiled {len(shipped)} of {len(shipped)} winners for sm90" in result.stdout


@pytest.mark.parametrize("args", [["show", "--db", "postgresql://nobody@127.0.0.1:1/x"],
                                  ["import", "/nonexistent/winners.jsonl"]])
def test_failures_are_one_line_on_stderr(args):
    result = run_cli(*args)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error: ")

"""Carry shipped winners across a kernel edit that leaves their programs unchanged.

A shipped row records the source hash of the kernel it was tuned on; any edit to the kernel's
modules or config schema makes it stale, and dispatch then passes it over. When the edit adds a
knob whose default reproduces the old program exactly, the tuned configs are still the tuned
programs. This builds every stale row's programs from the code at ``--against`` (a git revision,
in a throw-away worktree) and from the working tree, compares the generated CUDA, and gives the
rows whose programs are identical the current hash. Rows whose programs differ stay stale: they
need a re-tune on their GPU.

    python bench/carry_snapshot.py --against HEAD [--arch sm90] [--dry-run]

Compiles for the row's arch with nvcc (no GPU needed); each prefill row takes about a minute.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def snapshot_path(arch: str) -> Path:
    return REPO / "tileops" / "snapshots" / f"{arch}.jsonl"


def read_rows(arch: str) -> list:
    """The snapshot's winners, in file order."""
    from tileops.db.jsonl import read_winners

    rows, rejects = read_winners(snapshot_path(arch))
    if rejects:
        sys.exit(f"{snapshot_path(arch)}: lines refused: {rejects}")
    return rows


def current_hashes(rows: list) -> dict[str, str]:
    """The working tree's source hash of every kernel the rows name."""
    from tileops.kernels.registry import get_kernel

    return {name: get_kernel(name).source_hash for name in {row.kernel for row in rows}}


def dump_programs(rows: list, indices: list[int], out: Path) -> None:
    """Write the generated CUDA and host code of each listed row's programs into ``out`` (run with
    the tree to build from first on sys.path)."""
    import tilelang

    from program_identity import lower_only, programs

    tilelang.compile = lower_only
    from tileops.kernels.registry import get_kernel
    from tileops.cases import Case
    from tileops.tuner.cases import spec_for_arch

    for index in indices:
        row = rows[index]
        kernel = get_kernel(row.kernel)
        spec = spec_for_arch(Case.from_json(row.call), row.arch, row.device_name)
        try:
            launcher = kernel.build(kernel.validate_config(row.config, spec), spec)
        except ValueError as err:  # a config this code does not know: no programs, so the row differs
            print(f"  row {index} does not build here: {str(err).splitlines()[0][:200]}", flush=True)
            continue
        for name, program in programs(launcher).items():
            (out / f"{index}-{name}.cu").write_text(program.device)
            (out / f"{index}-{name}.host").write_text(program.host)
        print(f"  built row {index}: {row.kernel} {row.config}", flush=True)


def build_in(tree: Path, arch: str, indices: list[int], out: Path, cache: Path) -> subprocess.Popen:
    """A process that dumps the rows' programs as the code in ``tree`` builds them."""
    env = dict(os.environ, TILELANG_CACHE_DIR=str(cache), PYTHONPATH=str(tree))
    command = [sys.executable, __file__, "--dump", str(out), "--root", str(tree), "--arch", arch,
               "--rows", ",".join(map(str, indices))]
    return subprocess.Popen(command, cwd=tree, env=env)


def same_programs(index: int, old: Path, new: Path) -> bool:
    names = sorted(p.name for p in old.glob(f"{index}-*"))
    return bool(names) and names == sorted(p.name for p in new.glob(f"{index}-*")) and all(
        filecmp.cmp(old / n, new / n, shallow=False) for n in names)


def compare(worktree: Path, arch: str, rows: list[int], tmp: Path) -> list[int]:
    """The rows whose programs the code in ``worktree`` and the working tree build identically."""
    old, new = tmp / "old", tmp / "new"
    old.mkdir(parents=True)
    new.mkdir()
    builds = [build_in(worktree, arch, rows, old, tmp / "cache-old"), build_in(REPO, arch, rows, new, tmp / "cache-new")]
    if any([b.wait() != 0 for b in builds]):  # every build waited for: both write into tmp
        raise RuntimeError("a build failed")
    return [i for i in rows if same_programs(i, old, new)]


def carry(against: str, arch: str, dry_run: bool) -> int:
    from tileops.db.jsonl import export_winners

    rows = read_rows(arch)
    hashes = current_hashes(rows)
    stale = [i for i, row in enumerate(rows) if row.source_hash != hashes[row.kernel]]
    if not stale:
        print(f"every {arch} row already carries its kernel's current hash")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        worktree = tmp / "against"
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), against], cwd=REPO, check=True)
        try:
            carried = compare(worktree, arch, stale, tmp / "first")
            # A row whose programs differ is built once more, in fresh processes: a difference
            # that does not come back is not the kernel's.
            differing = [i for i in stale if i not in carried]
            carried += compare(worktree, arch, differing, tmp / "again") if differing else []
        except RuntimeError as err:
            print(f"{err}; nothing carried", file=sys.stderr)
            return 1
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, check=True)
    for i in stale:
        verdict = "identical programs: carried" if i in carried else "programs differ: stays stale, re-tune it"
        print(f"row {i} {rows[i].kernel} {rows[i].config}: {verdict}")
        if i in carried:
            rows[i] = rows[i].model_copy(update={"source_hash": hashes[rows[i].kernel]})
    if carried and not dry_run:
        export_winners(rows, snapshot_path(arch))
        print(f"wrote {snapshot_path(arch)}: {len(carried)} of {len(stale)} stale rows carried")
    return 0 if len(carried) == len(stale) else 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="the git revision the snapshot was tuned on")
    parser.add_argument("--arch", default="sm90")
    parser.add_argument("--dry-run", action="store_true", help="compare, but leave the snapshot as it is")
    parser.add_argument("--dump", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--rows", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dump:
        sys.path.insert(0, args.root)
        dump_programs(read_rows(args.arch), [int(i) for i in args.rows.split(",")], Path(args.dump))
        return
    sys.path.insert(0, str(REPO))
    sys.exit(carry(args.against, args.arch, args.dry_run))


if __name__ == "__main__":
    main()

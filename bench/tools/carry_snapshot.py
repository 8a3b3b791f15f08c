"""Carry shipped winners across a kernel edit that leaves their programs unchanged.

A shipped row records the code hash of the kernel it was tuned on (``kernels.code_hash``); an
edit to what the kernel's code computes, or to its config schema, makes it stale, and dispatch
then passes it over. When an edit leaves the tuned programs exactly as they were (a knob whose
default reproduces the old program, a removed value no row uses, a new way of forming the hash),
the tuned configs are still the tuned programs. This builds every stale row's programs from the
code at ``--against`` (a git revision, in a throw-away worktree) and from the working tree,
compares their generated CUDA and host code byte for byte, once a bounds test written twice
reads as once (``program_identity``: lowered as ``tilelang.compile`` lowers them, without nvcc or
a GPU), and gives the rows whose programs are identical the current hash and their config as the
working tree writes it. Rows whose programs differ stay stale: they need a re-tune on their GPU.

A knob removed since is dropped from the rows; ``--set KNOB=VALUE`` gives a knob added since the
value that builds the old programs (where the row's kernel has it), in place of its default.

    python bench/tools/carry_snapshot.py --against HEAD [--arch sm90] [--set prep_threads=128] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REBUILDS = 3  # fresh builds of a row whose programs differed, before it stays stale


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


def row_config(row, added: dict) -> dict:
    """A row's stored config with the ``added`` knobs its kernel now has and the row lacks."""
    from tileops.kernels.registry import get_kernel

    config = json.loads(row.config) if isinstance(row.config, str) else dict(row.config)
    fields = get_kernel(row.kernel).config_model.model_fields
    return dict({k: v for k, v in added.items() if k in fields and k not in config}, **config)


def row_jobs(rows: list, indices: list[int], added: dict) -> list[dict]:
    """The listed rows as ``program_identity`` jobs, their calls as the working tree reads them."""
    from program_identity import spec_json

    from tileops.cases import Case
    from tileops.tuner.cases import spec_for_arch

    return [dict(name=str(i), kernel=rows[i].kernel, config=row_config(rows[i], added),
                 spec=spec_json(spec_for_arch(Case.from_json(rows[i].call), rows[i].arch, rows[i].device_name)))
            for i in indices]


def current_config(row, added: dict):
    """The row's config as the working tree's kernel validates and writes it."""
    from program_identity import tree_config

    from tileops.kernels.registry import get_kernel

    kernel = get_kernel(row.kernel)
    return kernel.config_model.model_validate(tree_config(kernel, row_config(row, added))).model_dump(mode="json")


def compare(against: str, rows: list, indices: list[int], tmp: Path, added: dict) -> list[int]:
    """The rows whose programs the code at ``against`` and the working tree build identically."""
    from program_identity import build_both, identical

    old, new = build_both(against, row_jobs(rows, indices, added), tmp)
    return [i for i in indices if identical(str(i), old, new)]


def carry(against: str, arch: str, dry_run: bool, added: dict) -> int:
    from tileops.db.jsonl import export_winners

    rows = read_rows(arch)
    hashes = current_hashes(rows)
    stale = [i for i, row in enumerate(rows) if row.source_hash != hashes[row.kernel]]
    if not stale:
        print(f"every {arch} row already carries its kernel's current hash")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        try:
            carried = compare(against, rows, stale, Path(tmp) / "first", added)
            # A row whose programs differ is built again, alone in fresh processes, up to
            # REBUILDS times: a difference that does not come back is not the kernel's (TVM's
            # simplifier writes some bounds tests twice or once from one process to the next).
            for i in [i for i in stale if i not in carried]:
                for attempt in range(REBUILDS):
                    if compare(against, rows, [i], Path(tmp) / f"again-{i}-{attempt}", added):
                        carried.append(i)
                        break
        except RuntimeError as err:
            print(f"{err}; nothing carried", file=sys.stderr)
            return 1
    for i in stale:
        verdict = "identical programs: carried" if i in carried else "programs differ: stays stale, re-tune it"
        print(f"row {i} {rows[i].kernel} {rows[i].config}: {verdict}")
        if i in carried:
            rows[i] = rows[i].model_copy(update={"source_hash": hashes[rows[i].kernel],
                                                 "config": current_config(rows[i], added)})
    if carried and not dry_run:
        export_winners(rows, snapshot_path(arch))
        print(f"wrote {snapshot_path(arch)}: {len(carried)} of {len(stale)} stale rows carried")
    return 0 if len(carried) == len(stale) else 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="the git revision the snapshot was tuned on")
    parser.add_argument("--arch", default="sm90")
    parser.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE", type=knob_value,
                        help="a knob added since, at the value that builds the old programs (JSON value)")
    parser.add_argument("--dry-run", action="store_true", help="compare, but leave the snapshot as it is")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    sys.exit(carry(args.against, args.arch, args.dry_run, dict(args.set)))


def knob_value(text: str) -> tuple[str, object]:
    """``KNOB=VALUE`` (VALUE as JSON, or a bare word as text)."""
    knob, sep, value = text.partition("=")
    if not sep or not knob:
        raise argparse.ArgumentTypeError(f"expected KNOB=VALUE, not {text!r}")
    try:
        return knob, json.loads(value)
    except ValueError:
        return knob, value


if __name__ == "__main__":
    main()

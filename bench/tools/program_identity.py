"""Compare the programs GDN's kernels generate here with those of another revision, byte for byte
(once a bounds test written twice reads as once: ``canonical``).

Builds every launcher of a fixed matrix of (kernel, config, call) cases, in two processes: one on
the code at ``--against`` (a git revision, in a throw-away worktree) and one on the working tree.
``tilelang.compile`` is replaced by TileLang's lowering without nvcc, so each program is its
generated CUDA and the TIR of its host side (grid, launch and argument checks). Prints one line
per case and exits non-zero when any program differs or is missing on either side.

    python bench/tools/program_identity.py --against fecdce3 [--cases 0,3,7] [--keep DIR]

Needs no GPU and no nvcc: every program is lowered for {"kind": "cuda", "arch": "sm_90a"}. The
calls travel to both trees as JSON (``jobs``), so the older tree needs only ``tileops.callspec``
and its kernel registry; ``carry_snapshot.py`` builds the snapshot's rows the same way.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# (kernel, config overrides, call overrides): the layouts, tilings, walks and flags the kernels
# take, each program variant at least once.
PREFILL = "tl.gdn_prefill"
DECODE = "tl.gdn_decode"
FUSED = dict(state_major="value", block_v=128, threads=256, fused=True)
FLAGS = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
             allow_neg_eigval=True)
CASES = [
    (PREFILL, dict(block_v=32, threads=256, num_stages=2), {}),
    (PREFILL, dict(block_v=32, threads=128, num_stages=1), dict(mode="varlen")),
    (PREFILL, dict(block_v=32, threads=128, num_stages=1), dict(state_v_first=True, **FLAGS)),
    (PREFILL, dict(state_major="value", block_v=64, threads=128, num_stages=2), {}),
    (PREFILL, dict(state_major="value", block_v=128, threads=256, num_stages=1, walk_issue="paired"),
     dict(mode="varlen", state_v_first=True)),
    (PREFILL, dict(state_major="value", block_v=64, threads=128, num_stages=1),
     dict(mode="varlen", dtype="float16", dim=64, heads=2, value_heads=4, **FLAGS)),
    (PREFILL, dict(FUSED, num_stages=2), {}),
    (PREFILL, dict(FUSED, num_stages=2, walk_moves="matrix", walk_issue="paired"), dict(mode="varlen")),
    (PREFILL, dict(FUSED, num_stages=3, walk_moves="matrix"), dict(state_v_first=True)),
    (PREFILL, dict(FUSED, num_stages=3, walk_moves="tma-output", piece_chunks=128), {}),
    (PREFILL, dict(FUSED, num_stages=3, walk_moves="tma-output", walk_issue="paired", piece_chunks=64),
     dict(mode="varlen", **FLAGS)),
    (PREFILL, dict(FUSED, num_stages=2, walk_issue="paired"), dict(dtype="float16", **FLAGS)),
    (PREFILL, dict(state_major="value", block_v=64, threads=128, num_stages=2, fused=True, piece_chunks=32),
     dict(dim=64, heads=2, value_heads=4, state_v_first=True)),
    (DECODE, dict(block_v=32, threads=64), dict(mode="decode")),
    (DECODE, dict(block_v=64, threads=128), dict(mode="decode", **FLAGS)),
    (DECODE, dict(block_v=32, threads=128), dict(mode="decode", state_v_first=True, dtype="float16", dim=64)),
    (DECODE, dict(block_v=32, threads=32), dict(mode="decode", has_initial_state=False, dim=64, heads=4,
                                                value_heads=4)),
]


def call(mode: str = "prefill", dtype: str = "bfloat16", dim: int = 128, heads: int = 16, value_heads: int = 32,
         **flags):
    """The CallSpec of one case on an H200."""
    import torch

    from tileops.callspec import CallSpec, make_flags

    flags.setdefault("scale", dim ** -0.5)
    tokens = 1 if mode == "decode" else 4096
    return CallSpec(op="gdn", entry="GDNFwdOp", mode=mode, dtype=getattr(torch, dtype), device=torch.device("cuda"),
                    arch="sm90", device_name="NVIDIA H200", batch=4, tokens=tokens, heads=heads,
                    value_heads=value_heads, dim_k=dim, dim_v=dim, flags=make_flags(**flags))


def spec_json(spec) -> dict:
    """A CallSpec as JSON data."""
    data = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    return dict(data, dtype=str(spec.dtype).removeprefix("torch."), device=str(spec.device), flags=list(spec.flags))


def spec_from(data: dict):
    import torch

    from tileops.callspec import CallSpec

    return CallSpec(**dict(data, dtype=getattr(torch, data["dtype"]), device=torch.device(data["device"]),
                           flags=tuple(tuple(pair) for pair in data["flags"])))


def case_jobs(indices: list[int]) -> list[dict]:
    """The jobs of the listed cases: a name, a kernel, a config and a call each."""
    jobs = []
    for index in indices:
        name, overrides, flags = CASES[index]
        jobs.append(dict(name=str(index), kernel=name, config=overrides, spec=spec_json(call(**flags))))
    return jobs


class Lowered:
    """What the fake ``tilelang.compile`` returns: the program's sources, and the entry point the
    decode launcher asks for (it is never called)."""

    def __init__(self, device: str, host: str):
        self.device, self.host = device, host
        self.adapter = self

    def get_kernel_source(self) -> str:
        return self.device

    def get_exportable_executable(self):
        return self

    def get_function(self, name: str):
        return None


def lower_only(program, target=None, pass_configs=None, **_):
    """``tilelang.compile`` without nvcc: the program lowered as compile lowers it."""
    import tilelang
    import tvm

    target = tvm.target.Target(target)
    with tvm.transform.PassContext(opt_level=3, config=pass_configs or {}), target:
        artifact = tilelang.lower(program, target=target, enable_device_compile=False)
    return Lowered(artifact.kernel_source, artifact.host_mod.script())


def programs(launcher) -> dict[str, Lowered]:
    """The lowered programs a launcher holds (attributes, and the values of its dicts); a family's
    argument order around it (a closure over the launcher) is looked through."""
    for cell in getattr(launcher, "__closure__", None) or ():
        inner = programs(cell.cell_contents) if hasattr(cell.cell_contents, "__dict__") else {}
        if inner:
            return inner
    found = {}
    for name, value in sorted(vars(launcher).items()):
        members = enumerate(value.values()) if isinstance(value, dict) else [(None, value)]
        for position, program in members:
            program = lowered(program)
            if program is not None:
                found[name if position is None else f"{name}-{position}"] = program
    return found


def lowered(value) -> Lowered | None:
    """The lowered program behind a launcher's attribute: itself, or the one a compiled-program
    wrapper holds."""
    if isinstance(value, Lowered):
        return value
    inner = getattr(value, "__dict__", {}).get("_kernel")
    return inner if isinstance(inner, Lowered) else None


def tree_config(kernel, config: dict) -> dict:
    """``config`` as this tree's kernel reads it: its defaults, overridden by the knobs it declares.
    A knob another tree lacks is left out, so one job builds the same call on both sides of a knob
    added or removed (whether the programs then agree is what the comparison shows)."""
    model = kernel.config_model
    return dict(model().model_dump(), **{k: v for k, v in config.items() if k in model.model_fields})


def dump(jobs: list[dict], out: Path) -> None:
    """Write each job's programs into ``out`` (run with the tree to build from first on sys.path).
    A config the tree refuses gets no programs, so it compares as different."""
    import tilelang

    tilelang.compile = lower_only
    from tileops.kernels.registry import get_kernel

    for job in jobs:
        kernel = get_kernel(job["kernel"])
        spec = spec_from(job["spec"])
        try:
            config = kernel.validate_config(tree_config(kernel, job["config"]), spec)
        except ValueError as err:
            print(f"  {job['name']} does not build here: {str(err).splitlines()[0][:200]}", flush=True)
            continue
        for program, lowered in programs(kernel.build(config, spec)).items():
            (out / f"{job['name']}-{program}.cu").write_text(lowered.device)
            (out / f"{job['name']}-{program}.host").write_text(lowered.host)
        print(f"  built {job['name']} in {out.name}", flush=True)


def run_dump(tree: Path, jobs: Path, out: Path) -> subprocess.Popen:
    out.mkdir(parents=True)
    # An empty compile cache of its own: no kept program stands in for the lowering.
    env = dict(os.environ, PYTHONPATH=str(tree), TILELANG_CACHE_DIR=str(out / "cache"))
    command = [sys.executable, __file__, "--dump", str(out), "--root", str(tree), "--jobs", str(jobs)]
    return subprocess.Popen(command, cwd=tree, env=env)


def _matching(text: str, at: int, step: int) -> int:
    """Index of the bracket matching the one at ``at``, scanning by ``step`` (-1 from a ``)``, 1
    from a ``(``), or -1 when ``at`` holds no such bracket or it is unmatched."""
    opening, closing = ("(", ")") if step == 1 else (")", "(")
    if not 0 <= at < len(text) or text[at] != opening:
        return -1
    depth = 0
    for i in range(at, -1 if step < 0 else len(text), step):
        depth += (text[i] == opening) - (text[i] == closing)
        if depth == 0:
            return i
    return -1


def canonical(text: str) -> str:
    """``text`` with every ``(X && X)`` written as ``X``: TVM's simplifier writes some bounds tests
    twice or once depending on what else the program holds, which changes no program's meaning."""
    at = text.find(" && ")
    while at >= 0:
        left, right = _matching(text, at - 1, -1), _matching(text, at + 4, 1)
        right_end = right + 1 if right >= 0 else -1
        if (left > 0 and right_end > 0 and text[left - 1] == "(" and text[right_end:right_end + 1] == ")"
                and text[left:at] == text[at + 4:right_end]):
            text = text[:left - 1] + text[left:at] + text[right_end + 1:]
            at = text.find(" && ", left - 1)
        else:
            at = text.find(" && ", at + 4)
    return text


def identical(name: str, old: Path, new: Path) -> bool:
    """Whether both trees built the same programs for job ``name``: the same files, equal byte for
    byte once ``canonical``."""
    names = sorted(p.name for p in old.glob(f"{name}-*"))
    return bool(names) and names == sorted(p.name for p in new.glob(f"{name}-*")) and all(
        canonical((old / n).read_text()) == canonical((new / n).read_text()) for n in names)


def build_both(against: str, jobs: list[dict], tmp: Path) -> tuple[Path, Path]:
    """Dump the jobs' programs as the code at ``against`` and the working tree build them, into
    ``tmp``/old and ``tmp``/new; RuntimeError when a build fails."""
    tmp.mkdir(parents=True, exist_ok=True)
    worktree = tmp / "against"
    listing = tmp / "jobs.json"
    listing.write_text(json.dumps(jobs))
    subprocess.run(["git", "worktree", "add", "--detach", str(worktree), against], cwd=REPO, check=True,
                   capture_output=True)
    try:
        builds = [run_dump(worktree, listing, tmp / "old"), run_dump(REPO, listing, tmp / "new")]
        failed = [b.wait() != 0 for b in builds]  # every build waited for: both write into tmp
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, check=True)
    if any(failed):
        raise RuntimeError("a build failed")
    return tmp / "old", tmp / "new"


def compare(against: str, indices: list[int], keep: Path | None) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(keep or tmp)
        try:
            old, new = build_both(against, case_jobs(indices), tmp)
        except RuntimeError as err:
            print(err, file=sys.stderr)
            return 1
        differ = [i for i in indices if not identical(str(i), old, new)]
        for i in indices:
            count = len(list(new.glob(f"{i}-*.cu")))
            print(f"case {i} {CASES[i][0]} {CASES[i][1]} {CASES[i][2]}: {count} programs "
                  f"{'DIFFER' if i in differ else 'identical'}")
        print(f"{len(indices) - len(differ)} of {len(indices)} cases identical to {against}")
        return 1 if differ else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="the git revision to compare with")
    parser.add_argument("--cases", help="comma-separated case indices (default: all)")
    parser.add_argument("--keep", help="write the worktree and the programs here instead of a temporary folder")
    parser.add_argument("--dump", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dump:
        sys.path.insert(0, args.root)
        dump(json.loads(Path(args.jobs).read_text()), Path(args.dump))
        return
    indices = [int(i) for i in args.cases.split(",")] if args.cases else list(range(len(CASES)))
    sys.exit(compare(args.against, indices, Path(args.keep) if args.keep else None))


if __name__ == "__main__":
    main()

"""What each fused-kernel walk variant costs per chunk in machine code, without a GPU.

Compiles the fused GDN prefill for sm_90a (bf16, H16/HV32, K = V = 128) in every walk variant,
disassembles it and counts, in the state warpgroups' chunk loop (the loop whose products take
their A operand from registers), the instructions by kind: shared loads and stores, matrix moves,
CTA barriers, waits for the tensor cores. Also reports the kernel's local-memory spills and its
dynamic shared memory. Needs nvcc and cuobjdump (``pip install triton`` carries one).

    python bench/studies/fused_sass_counts.py [--jobs 2] [--variants "elementwise serial 3" ...]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

VARIANTS = {
    "elementwise serial 2": dict(),
    "matrix serial 2": dict(walk_moves="matrix"),
    "elementwise paired 2": dict(walk_issue="paired"),
    "matrix paired 2": dict(walk_moves="matrix", walk_issue="paired"),
    "elementwise serial 3": dict(stages=3),
    "matrix serial 3": dict(walk_moves="matrix", stages=3),
    "matrix paired 3": dict(walk_moves="matrix", walk_issue="paired", stages=3),
    "tma-output serial 3": dict(walk_moves="tma-output", stages=3),
}
COLUMNS = ("instructions", "LDS", "STS", "LDSM", "STSM", "BAR", "DEPBAR", "HGMMA")
LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*);")


def cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import triton
    except ImportError:
        sys.exit("cuobjdump is needed: put the CUDA toolkit's on PATH, or pip install triton")
    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")


def build(name: str) -> tuple[str, str, int]:
    """(name, SASS, dynamic shared memory) of one variant."""
    import torch

    from tileops.callspec import CallSpec, make_flags
    from tileops.kernels.prefill_kernel import fused_config
    from tileops.kernels.launch.chunked_programs import compile_fused
    from tileops.kernels.plans.tiles import fused_smem_bytes

    spec = CallSpec(op="gdn", entry="GDNFwdOp", mode="prefill", dtype=torch.bfloat16, device=torch.device("cuda"),
                    arch="sm90", device_name="NVIDIA H200", batch=8, tokens=4096, heads=16, value_heads=32,
                    dim_k=128, dim_v=128, flags=make_flags(scale=128 ** -0.5))
    config = fused_config(128, **VARIANTS[name])
    kernel = compile_fused(config, spec)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernel.cu"
        source.write_text(kernel.get_kernel_source())
        include = Path(__import__("tilelang").__file__).parent
        cubin = Path(tmp) / "kernel.cubin"
        subprocess.run(["nvcc", "--cubin", "-O3", "-arch=sm_90a", "-std=c++20", "--use_fast_math",
                        f"-I{include / 'src'}", f"-I{include / '3rdparty' / 'cutlass' / 'include'}",
                        "-o", str(cubin), str(source)], check=True, capture_output=True)
        sass = subprocess.run([cuobjdump(), "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
    return name, sass, fused_smem_bytes(128, 2, config.num_stages, config.walk_moves)


def walker_loop(sass: str) -> collections.Counter:
    """Opcode counts of the shortest backward-branching span holding a register-A HGMMA: the
    state warpgroups' chunk loop (longer spans end in the barrier waits' out-of-line retries)."""
    code = [(int(m.group(1), 16), m.group(2), m.group(3)) for m in LINE.finditer(sass)]
    loops = []
    for address, opcode, operands in code:
        target = re.search(r"0x([0-9a-f]+)", operands) if opcode == "BRA" else None
        if target and int(target.group(1), 16) < address:
            body = [(op, args) for a, op, args in code if int(target.group(1), 16) <= a <= address]
            if any(op.startswith("HGMMA") and re.match(r"\s*R\d+, R\d+, gdesc", args) for op, args in body):
                loops.append(body)
    loop = min(loops, key=len)
    counts = collections.Counter(op.split(".")[0] for op, _ in loop)
    counts["instructions"] = len(loop)
    counts["DEPBAR"] = sum(1 for op, _ in loop if op.startswith("WARPGROUP.DEPBAR"))
    return counts


def spills(sass: str) -> int:
    return sum(1 for m in LINE.finditer(sass) if m.group(2).split(".")[0] in ("LDL", "STL"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args()
    with ProcessPoolExecutor(args.jobs) as pool:
        built = list(pool.map(build, args.variants))
    header = ["walk variant (moves, waits, input stages)", *COLUMNS, "LDL/STL in kernel", "smem B"]
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for name, sass, smem in built:
        counts = walker_loop(sass)
        print(" | ".join([name, *(str(counts[c]) for c in COLUMNS), str(spills(sass)), str(smem)]))


if __name__ == "__main__":
    main()

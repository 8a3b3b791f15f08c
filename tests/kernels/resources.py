"""What a compiled TileLang program takes of an SM: registers, spills and static shared memory as
ptxas reports them for the kernel's own source, its block size and its launch's shared memory."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass

import pytest

from tileops.kernels.hardware import REGISTERS, SMEM_BYTES

SM_SMEM_BYTES = 228 * 1024  # shared memory of one sm90 SM, which its resident blocks share
BLOCK_SMEM_RESERVED = 1024  # what the hardware keeps of it for each resident block

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is needed to compile for sm_90a")
MAX_THREAD_REGISTERS = 255


@dataclass(frozen=True)
class Usage:
    registers: int
    spilled: int  # bytes of spill stores and loads
    stack: int
    smem: int  # static shared memory


@functools.lru_cache(maxsize=None)
def _ptxas(source: str, arch: str, fast_math: bool) -> dict[str, Usage]:
    """Kept beside TileLang's kernel cache, by the hash of the source and options, like the binaries."""
    import tilelang
    from tilelang.env import env

    root = os.path.dirname(tilelang.__file__)
    key = hashlib.sha256(f"{arch} {fast_math} {tilelang.__version__}\n{source}".encode()).hexdigest()
    kept = os.path.join(str(env.TILELANG_CACHE_DIR), "ptxas-usage", f"{key}.json")
    if os.path.exists(kept):
        with open(kept) as f:
            return {name: Usage(**fields) for name, fields in json.load(f).items()}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cu")
        with open(path, "w") as out:
            out.write(source)
        cmd = ["nvcc", "-cubin", "-O3", "-std=c++20", f"-arch={arch}", f"-I{root}/src",
               f"-I{root}/3rdparty/cutlass/include", "-Xptxas", "-v", "-o", os.path.join(tmp, "kernel.cubin"), path]
        if fast_math:
            cmd.insert(1, "--use_fast_math")
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    usage = {}
    for entry in re.split(r"Compiling entry function ", done.stdout + done.stderr)[1:]:
        name = re.match(r"'([^']+)'", entry).group(1)
        frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", entry)
        regs = re.search(r"Used (\d+) registers", entry)
        smem = re.search(r"(\d+) bytes smem", entry)
        usage[name] = Usage(registers=int(regs.group(1)), spilled=int(frame.group(2)) + int(frame.group(3)),
                            stack=int(frame.group(1)), smem=int(smem.group(1)) if smem else 0)
    assert usage, done.stderr[-2000:]
    os.makedirs(os.path.dirname(kept), exist_ok=True)
    with open(kept + ".tmp", "w") as f:
        json.dump({name: asdict(u) for name, u in usage.items()}, f)
    os.replace(kept + ".tmp", kept)
    return usage


def ptxas_usage(kernel) -> dict[str, Usage]:
    """ptxas's report on each entry of a compiled kernel's generated source, built as TileLang builds it."""
    from tilelang import PassConfigKey

    fast_math = bool(kernel.pass_configs.get(PassConfigKey.TL_ENABLE_FAST_MATH, False))
    return _ptxas(kernel.get_kernel_source(), str(kernel.target.attrs["arch"]), fast_math)


def _tirx():
    """TVM's TIR module, which TileLang's import puts on the path (a kept program loads without it)."""
    import tilelang  # noqa: F401
    from tvm import tirx

    return tirx


def block_threads(kernel) -> int:
    """The threads of one block of the program: the extents of its threadIdx bindings."""
    tirx = _tirx()

    extents = {}

    def visit(node):
        if isinstance(node, tirx.For) and node.thread_binding is not None:
            tag = node.thread_binding.thread_tag
            if tag.startswith("threadIdx"):
                extents[tag] = int(node.extent)

    tirx.stmt_functor.post_order_visit(kernel.prim_func.body, visit)
    assert "threadIdx.x" in extents
    return extents["threadIdx.x"] * extents.get("threadIdx.y", 1) * extents.get("threadIdx.z", 1)


def launch_smem(kernel) -> int:
    """The dynamic shared memory a compiled kernel launches with: its host code's last integer launch
    argument."""
    return int(re.findall(r"v_int64\) = \(\(int64_t\)(\d+)\);", kernel.get_host_source())[-1])


def assert_fits_an_sm(kernel, dynamic_smem: int = 0, spills: bool = False) -> Usage:
    """One block of the kernel launches on an SM: its registers within the block's share of the
    register file, static plus dynamic shared memory within budget, and (unless ``spills``)
    nothing spilled to local memory."""
    threads = block_threads(kernel)
    (usage,) = ptxas_usage(kernel).values()
    assert usage.registers <= min(MAX_THREAD_REGISTERS, REGISTERS // threads), (usage, threads)
    assert spills or usage.spilled == 0, usage
    assert usage.smem + dynamic_smem <= SMEM_BYTES, (usage, dynamic_smem)
    return usage


def runtime_dims(kernel) -> set[str]:
    """The names of the run-time (symbolic) extents of the program's tensors."""
    tirx = _tirx()

    func = kernel.prim_func
    return {d.name for p in func.params if p in func.buffer_map for d in func.buffer_map[p].shape
            if isinstance(d, tirx.Var)}


def blocks_per_sm(kernel) -> int:
    """How many blocks of the program one SM holds at once, by its shared memory and registers."""
    threads = block_threads(kernel)
    (usage,) = ptxas_usage(kernel).values()
    by_smem = SM_SMEM_BYTES // (usage.smem + launch_smem(kernel) + BLOCK_SMEM_RESERVED)
    return min(by_smem, REGISTERS // (usage.registers * threads))


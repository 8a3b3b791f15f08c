"""Compiled programs are kept by what they are built from and loaded in a fresh process without
TileLang; kernels' code hashes are kept under the package's files as they are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kernels.resources import needs_nvcc
from tileops.kernels import code_hash
from tileops.kernels.launch import compiled as compiled_module
from tileops.kernels.launch.compiled import LIBRARY, SOURCE, compiled, program_folder, prune_other_versions
from tileops.kernels.plans.decode_tile import DecodeShape

ROOT = Path(__file__).resolve().parents[2]
DECODE = "tileops.kernels.programs.decode:decode_program"
SHAPE = DecodeShape(heads=2, value_heads=2, dim_k=64, dim_v=64, dtype="bfloat16", g_dtype="float32",
                    beta_dtype="float32", a_log_dtype="float32", dt_bias_dtype="float32", block_v=32, threads=128,
                    state_v_first=False, has_state=True, scale=0.125, l2norm=False, beta_sigmoid=False,
                    neg_eigval=False, gate_in_kernel=False)

# A fresh process: the GDN decode kernel's launcher for a call whose program is kept, then what it
# imported and how its program came to be.
FRESH = r"""
import json, sys, torch
from tileops.callspec import CallSpec, make_flags
from tileops.kernels.registry import get_kernel
spec = CallSpec(op="gdn", entry="GDNFwdOp", mode="decode", dtype=torch.bfloat16, device=torch.device("cuda", 0),
                arch="sm90", device_name="NVIDIA H200", batch=8, tokens=1, heads=2, value_heads=2, dim_k=64,
                dim_v=64, flags=make_flags(scale=0.125, has_initial_state=True))
kernel = get_kernel("tl.gdn_decode")
(program,) = kernel.build(kernel.default(spec), spec).programs.values()
print(json.dumps({"tilelang": "tilelang" in sys.modules, "compiled_here": program._kernel is not None,
                  "entry": type(program.entry).__name__, "folder": str(program.folder)}))
"""


def fresh_process(cache: Path) -> dict:
    env = dict(os.environ, TILELANG_CACHE_DIR=str(cache))
    done = subprocess.run([sys.executable, "-c", FRESH], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_nvcc
def test_a_fresh_process_loads_a_kept_program_without_tilelang(tmp_path):
    first = fresh_process(tmp_path)  # compiles, then keeps the library and its source
    assert first["compiled_here"] and first["tilelang"]
    folder = Path(first["folder"])
    assert (folder / LIBRARY).stat().st_size > 0 and "__global__" in (folder / SOURCE).read_text()
    second = fresh_process(tmp_path)
    assert second == dict(first, tilelang=False, compiled_here=False)
    assert second["entry"] == "Function"


# A fresh process asks for the decode program of SHAPE: whether it had to compile it.
ASK = r"""
import logging
from tileops.kernels.launch.compiled import compiled
from tileops.kernels.plans.decode_tile import DecodeShape
logging.basicConfig()
shape = DecodeShape(**{shape!r})
print("compiled" if compiled({builder!r}, dict(s=shape), "sm90")._kernel is not None else "loaded")
"""


def ask_in_fresh_process(cache: Path) -> tuple[str, str]:
    code = ASK.format(shape=SHAPE.__dict__, builder=DECODE)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, TILELANG_CACHE_DIR=str(cache)),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()[-1], done.stderr


@needs_nvcc
def test_a_damaged_kept_program_is_compiled_again_and_replaced(tmp_path):
    assert ask_in_fresh_process(tmp_path)[0] == "compiled"
    (library,) = (tmp_path / "tileops" / "programs").glob(f"*/*/{LIBRARY}")
    library.write_bytes(b"not a library")
    outcome, log = ask_in_fresh_process(tmp_path)
    assert outcome == "compiled" and "could not be loaded" in log
    assert ask_in_fresh_process(tmp_path)[0] == "loaded"


@needs_nvcc
def test_a_loaded_program_still_shows_its_source(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    built = compiled(DECODE, dict(s=SHAPE), "sm90")
    assert compiled(DECODE, dict(s=SHAPE), "sm90") is built  # once a process
    monkeypatch.setattr(compiled_module, "PROGRAMS", {})  # as a fresh process finds it
    loaded = compiled(DECODE, dict(s=SHAPE), "sm90")
    assert loaded._kernel is None
    assert loaded.get_kernel_source() == built.get_kernel_source() == (built.folder / SOURCE).read_text()


def tma_copy_program(rows: int, cols: int):
    """A copy through shared memory that TileLang lowers to TMA on sm90: its host code creates the
    tensor maps through ``__tvm_tensormap_create_tiled``."""
    import tilelang.language as T

    tokens, half = T.dynamic("tokens"), "float16"

    @T.prim_func
    def tma_copy(a: T.Tensor((tokens, cols), half), b: T.Tensor((tokens, cols), half)):
        with T.Kernel(T.ceildiv(tokens, rows), threads=128) as bx:
            tile = T.alloc_shared((rows, cols), half)
            T.copy(a[bx * rows:(bx + 1) * rows, :], tile)
            T.copy(tile, b[bx * rows:(bx + 1) * rows, :])
    return tma_copy


# A fresh process loads a kept library and lists the host functions its code looks up that the
# global registry lacks.
REGISTRY = r"""
import json, re, sys
from pathlib import Path
from tileops.kernels.launch.compiled import HOST, LIBRARY, load_library
import tvm_ffi
folder = Path({folder!r})
load_library(folder / LIBRARY)
names = set(re.findall(r'GetFuncFromEnv\([^,]*, "(__tvm\w+)"', (folder / HOST).read_text()))
print(json.dumps({{"names": sorted(names), "missing": sorted(n for n in names if tvm_ffi.get_global_func(n, allow_missing=True) is None),
                  "tilelang": "tilelang" in sys.modules}}))
"""


@needs_nvcc
def test_the_host_functions_a_kept_program_calls_are_registered_without_tilelang(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    program = compiled("tests.kernels.test_compiled:tma_copy_program", dict(rows=64, cols=64), "sm90")
    done = subprocess.run([sys.executable, "-c", REGISTRY.format(folder=str(program.folder))], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert "__tvm_tensormap_create_tiled" in found["names"] and "__tvm_set_device" in found["names"]
    assert found["missing"] == [] and not found["tilelang"]


def test_every_part_of_a_program_names_it():
    base = program_folder(DECODE, dict(s=SHAPE), "sm90", {})
    others = [program_folder(DECODE, dict(s=SHAPE), "sm80", {}),
              program_folder(DECODE, dict(s=SHAPE), "sm90", {compiled_module.FAST_MATH: True}),
              program_folder("tileops.kernels.programs.decode:other", dict(s=SHAPE), "sm90", {}),
              program_folder(DECODE, dict(s=DecodeShape(**dict(SHAPE.__dict__, block_v=64))), "sm90", {}),
              program_folder(DECODE, dict(s=DecodeShape(**dict(SHAPE.__dict__, scale=0.125000001))), "sm90", {})]
    assert len({base, *others}) == 1 + len(others)
    assert program_folder(DECODE, dict(s=SHAPE), "sm90", {}) == base


def test_a_program_kept_under_other_kernel_code_or_compiler_is_not_found(monkeypatch):
    base = program_folder(DECODE, dict(s=SHAPE), "sm90", {})
    monkeypatch.setattr(compiled_module, "package_stamp", lambda: "other files")
    edited = program_folder(DECODE, dict(s=SHAPE), "sm90", {})
    monkeypatch.undo()
    monkeypatch.setattr(compiled_module, "_tilelang_version", lambda: "0.0.0")
    assert len({base, edited, program_folder(DECODE, dict(s=SHAPE), "sm90", {})}) == 3


def test_pruning_removes_the_programs_of_other_versions_only(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    current = program_folder(DECODE, dict(s=SHAPE), "sm90", {})
    monkeypatch.setattr(compiled_module, "package_stamp", lambda: "older files")
    older = program_folder(DECODE, dict(s=SHAPE), "sm90", {})
    monkeypatch.undo()
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    for folder in (current, older):
        folder.mkdir(parents=True)
        (folder / LIBRARY).write_bytes(b"kept")
    assert prune_other_versions() == 1
    assert (current / LIBRARY).exists() and not older.parent.exists()
    assert prune_other_versions() == 0


def test_a_kept_code_hash_is_read_not_parsed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    roots = ("tileops.kernels.gdn.prefill",)
    expected = code_hash.code_hash(roots, "tl.gdn_prefill", "space")
    assert code_hash.kept_code_hash(roots, "tl.gdn_prefill", "space") == expected

    def no_parsing(*args, **kwargs):
        raise AssertionError("parsed again")

    monkeypatch.setattr(code_hash, "code_hash", no_parsing)
    assert code_hash.kept_code_hash(roots, "tl.gdn_prefill", "space") == expected
    with pytest.raises(AssertionError, match="parsed again"):  # other extras are another hash
        code_hash.kept_code_hash(roots, "tl.gdn_prefill", "other space")
    monkeypatch.setattr(code_hash, "package_stamp", lambda: "edited files")
    with pytest.raises(AssertionError, match="parsed again"):  # edited files are parsed again
        code_hash.kept_code_hash(roots, "tl.gdn_prefill", "space")


def test_every_builder_a_launcher_names_is_a_program_function():
    import ast
    import importlib

    from tileops.kernels.code_hash import BUILDER

    named = {node.value for path in (ROOT / "tileops" / "kernels" / "launch").glob("*.py")
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and BUILDER.fullmatch(node.value)}
    assert len(named) >= 10
    for builder in named:
        module, name = builder.split(":")
        assert callable(getattr(importlib.import_module(module), name)), builder

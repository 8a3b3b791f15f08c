"""Compiled programs kept on disk by what they are built from, and loaded without the compiler.

A program is named by its builder (``module:function`` under ``tileops.kernels``), the builder's
arguments, the target and the pass configs, and stamped with the kernel package's source and
TileLang's version. Its first build compiles it with TileLang and keeps the library and its CUDA
and host sources in the store (``kernels.kept``); a later process finds them there and loads the
library through tvm-ffi and TileLang's native libraries alone, so a warm first call neither
imports TileLang's Python package nor rebuilds the program's IR.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from tileops.kernels.code_hash import package_stamp
from tileops.kernels.hardware import compile_target
from tileops.kernels.kept import kept_root

# TileLang's pass configs by the names it reads (its PassConfigKey values), so that no import of
# TileLang is needed to name them.
DISABLE_WARP_SPECIALIZED = "tl.disable_warp_specialized"
FAST_MATH = "tl.enable_fast_math"
LIBRARY, SOURCE, HOST = "executable.so", "kernel.cu", "host.cu"
log = logging.getLogger("tileops.kernels")


@functools.lru_cache(maxsize=None)
def _tilelang_version() -> str:
    try:
        return importlib.metadata.version("tilelang")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def version_folder() -> Path:
    """The store's folder for the kernel package's current files and this TileLang: a program kept
    under other code or another compiler is never loaded."""
    stamp = hashlib.sha256(f"{package_stamp()} {_tilelang_version()}".encode()).hexdigest()[:16]
    return kept_root() / "programs" / stamp


def program_folder(builder: str, args: dict, arch: str, pass_configs: dict) -> Path:
    """Where one program is kept."""
    text = json.dumps([builder, repr(sorted(args.items())), compile_target(arch), sorted(pass_configs.items())])
    return version_folder() / hashlib.sha256(text.encode()).hexdigest()[:32]


def prune_other_versions() -> int:
    """Remove the programs kept for other versions of the kernel package or TileLang (a process of
    such a version compiles them again); how many versions were removed."""
    current = version_folder()
    others = [folder for folder in current.parent.glob("*") if folder.is_dir() and folder != current]
    for folder in others:
        shutil.rmtree(folder, ignore_errors=True)
    return len(others)


class Program:
    """A compiled program: called with its tensors and run-time values in the program's order.

    Any other attribute (``get_kernel_source``, ``prim_func``, ...) is TileLang's compiled kernel's,
    built on first use (from TileLang's own cache when the program was loaded from the store), for
    inspection and tests.
    """

    def __init__(self, entry: Callable, build: Callable[[], Any], folder: Path, kernel: Any = None) -> None:
        self.entry = entry
        self.folder = folder
        self._build = build
        self._kernel = kernel

    def __call__(self, *args: Any) -> Any:
        return self.entry(*args)

    @property
    def kernel(self) -> Any:
        """TileLang's JIT kernel of this program."""
        if self._kernel is None:
            self._kernel = self._build()
        return self._kernel

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.kernel, name)


# The programs this process has, by their folder in the store: each is loaded or compiled once.
PROGRAMS: dict[Path, Program] = {}


def compiled(builder: str, args: dict, arch: str, pass_configs: dict = {}) -> Program:  # noqa: B006 - read only
    """The program ``builder(**args)`` for ``arch``: this process's, else loaded from the store, else
    compiled and kept."""
    folder = program_folder(builder, args, arch, pass_configs)
    program = PROGRAMS.get(folder)
    if program is None:
        program = PROGRAMS[folder] = _load_or_compile(builder, args, arch, pass_configs, folder)
    return program


def _load_or_compile(builder: str, args: dict, arch: str, pass_configs: dict, folder: Path) -> Program:
    def build():
        import tilelang

        module, name = builder.split(":")
        program = getattr(importlib.import_module(module), name)(**args)
        return tilelang.compile(program, target=compile_target(arch), pass_configs=dict(pass_configs),
                                execution_backend="tvm_ffi")

    if (folder / LIBRARY).is_file():
        try:
            return Program(load_library(folder / LIBRARY), build, folder)
        except Exception as err:  # a damaged entry is compiled again, and replaced
            log.warning("kept program %s could not be loaded (%s); compiling it again", folder, err)
            shutil.rmtree(folder, ignore_errors=True)
    kernel = build()
    entry = load_library(folder / LIBRARY) if _keep(kernel, folder) else entry_point(kernel)
    return Program(entry, build, folder, kernel)


def entry_point(kernel: Any) -> Callable:
    """A TileLang kernel's tvm-ffi function (a program that could not be kept). Called directly it
    skips the JIT wrapper's per-argument Python; the function still checks the arguments' shapes,
    dtypes and strides."""
    module = kernel.adapter.get_exportable_executable()
    return (module.jit() if hasattr(module, "jit") else module).get_function("main")


# TileLang's native libraries a kept program's host code needs, not its Python package: the CUDA
# module loader and ``__tvm_set_device`` (the runtime), ``__tvm_tensormap_create_tiled`` (TMA
# descriptors, in TileLang's own library).
NATIVE_LIBRARIES = ("libtvm_runtime.so", "libtilelang.so")


@functools.lru_cache(maxsize=None)
def _tvm_ffi():
    """tvm-ffi with TileLang's native libraries loaded beside it."""
    import tvm_ffi

    spec = importlib.util.find_spec("tilelang")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("TileLang is not installed: its native libraries serve the compiled programs")
    folder = Path(list(spec.submodule_search_locations)[0]) / "lib"
    for name in NATIVE_LIBRARIES:
        ctypes.CDLL(str(folder / name), mode=os.RTLD_GLOBAL | os.RTLD_LAZY)
    return tvm_ffi


def load_library(path: Path) -> Callable:
    """The entry function of a kept program's library."""
    return _tvm_ffi().load_module(str(path)).get_function("main")


def _keep(kernel: Any, folder: Path) -> bool:
    """Put a freshly compiled kernel's library and CUDA source in the store; whether it is there
    now. A store that cannot be written only costs the next process a compile (logged)."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=folder.parent))
        made = getattr(kernel, "_tilelang_cache_path", None)
        if made and (Path(made) / LIBRARY).is_file():
            shutil.copyfile(Path(made) / LIBRARY, staging / LIBRARY)
        else:
            kernel.adapter.get_exportable_executable().export_library(str(staging / LIBRARY))
        (staging / SOURCE).write_text(kernel.get_kernel_source() or "")
        (staging / HOST).write_text(kernel.get_host_source() or "")
        try:
            os.rename(staging, folder)
        except OSError:  # another process kept it first
            shutil.rmtree(staging, ignore_errors=True)
        return (folder / LIBRARY).is_file()
    except Exception as err:
        log.warning("could not keep compiled program in %s (%s)", folder, err)
        return False

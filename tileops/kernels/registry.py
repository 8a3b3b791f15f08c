"""The registry of kernels by name, filled by importing the kernel modules on first use."""

from __future__ import annotations

import importlib
import os

from tileops.kernels.base import KernelDef

# Modules that call ``register`` at import. Order is irrelevant; names are unique. More modules
# (out-of-tree kernels to tune or serve) can be named, comma-separated, in $TILEOPS_EXTRA_KERNELS.
KERNEL_MODULES = (
    "tileops.kernels.reference_kernels",
    "tileops.kernels.gdn",
    "tileops.kernels.deltanet",
    "tileops.kernels.kda",
    "tileops.kernels.gla",
)

_KERNELS: dict[str, KernelDef] = {}
_loaded = False


def register(kernel: KernelDef) -> KernelDef:
    """Add a kernel; a second kernel under the same name is an error."""
    if kernel.name in _KERNELS and _KERNELS[kernel.name] is not kernel:
        raise ValueError(f"kernel {kernel.name!r} is already registered")
    _KERNELS[kernel.name] = kernel
    return kernel


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        extra = [m.strip() for m in os.environ.get("TILEOPS_EXTRA_KERNELS", "").split(",") if m.strip()]
        for module in (*KERNEL_MODULES, *extra):
            importlib.import_module(module)


def get_kernel(name: str) -> KernelDef:
    """The kernel registered under ``name``; KeyError lists the known names."""
    _load()
    try:
        return _KERNELS[name]
    except KeyError:
        raise KeyError(f"no kernel named {name!r}; known: {sorted(_KERNELS)}") from None


def all_kernels() -> list[KernelDef]:
    """Every registered kernel, sorted by name."""
    _load()
    return [_KERNELS[n] for n in sorted(_KERNELS)]


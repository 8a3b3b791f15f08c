"""From (op class, target, call) to a launcher: the hot path of every op call.

The first call of a given shape resolves the target, selects a config and builds the kernel;
every later call is one dictionary lookup.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Optional

from tileops.dispatch.compile_cache import built
from tileops.dispatch.lookup import Selection, select
from tileops.callspec import CallSpec
from tileops.kernels.base import KernelDef, Launcher
from tileops.kernels.registry import get_kernel
from tileops.targets import BUILTIN, REFERENCE, external, kernel_names, known_targets, on_change

_LAUNCHERS: dict[tuple, Launcher] = {}
_MAX_LAUNCHERS = 4096
_warned: set[tuple] = set()


@dataclass(frozen=True)
class Route:
    """Who serves a call: an in-tree kernel with its config selection, or an external callable."""

    target: str
    kernel: Optional[KernelDef] = None
    selection: Optional[Selection] = None
    implementation: Optional[Callable] = None
    notes: tuple[str, ...] = ()


def first_accepting(target: str, op_name: str, spec: CallSpec) -> tuple[Optional[KernelDef], list[str]]:
    """The first kernel of ``target`` that accepts the call, and the refusals before it."""
    refusals = []
    for name in kernel_names(target, op_name):
        kernel = get_kernel(name)
        reason = kernel.refuse(spec)
        if reason is None:
            return kernel, refusals
        refusals.append(f"{name}: {reason}")
    return None, refusals


def route(op_name: str, target: Optional[str], spec: CallSpec) -> Route:
    """Resolve the target for one call (no compile)."""
    notes: list[str] = []
    if target is None:
        if spec.device.type == "cuda":
            kernel, refusals = first_accepting(BUILTIN, op_name, spec)
            if kernel is not None:
                return Route(BUILTIN, kernel, select(kernel, spec), notes=tuple(refusals))
            notes = [f"no in-tree kernel serves this call ({'; '.join(refusals) or 'none registered'}); "
                     "the PyTorch reference serves it"]
            _warn_once((op_name, spec.program_facts), f"{op_name}: {notes[0]}")
        target = REFERENCE
    if target in (BUILTIN, REFERENCE):
        return _in_tree(op_name, target, spec, notes)
    implementation = external(target, op_name)
    if implementation is None:
        raise ValueError(f"unknown target {target!r} for {op_name}; known targets: {known_targets(op_name)} "
                         "(register one with tileops.linear_attention.register_target)")
    return Route(target, implementation=implementation, notes=tuple(notes))


def _in_tree(op_name: str, target: str, spec: CallSpec, notes: list[str]) -> Route:
    if target == BUILTIN and spec.device.type != "cuda":
        raise ValueError(f"{op_name}: target=BUILTIN runs the in-tree GPU kernels, but the inputs are on "
                         f"{spec.device}; target='reference' (or target=None) serves CPU tensors")
    kernel, refusals = first_accepting(target, op_name, spec)
    if kernel is None:
        why = "; ".join(refusals) if refusals else f"{op_name} has no in-tree {target} kernel yet"
        raise ValueError(f"{op_name}: no {target} kernel serves this call: {why}. "
                         "target='reference' serves every call, or register an external target")
    return Route(target, kernel, select(kernel, spec), notes=tuple(notes + refusals))


def _warn_once(key: tuple, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def _launcher(op_name: str, target: Optional[str], spec: CallSpec) -> Launcher:
    chosen = route(op_name, target, spec)
    if chosen.implementation is not None:
        return chosen.implementation
    return built(chosen.kernel, chosen.selection.config, spec)


def launcher_for(op_name: str, target: Optional[str], spec: CallSpec) -> Launcher:
    """The launcher for a call; after the first call of a shape, a single dictionary lookup."""
    key = (op_name, target, spec)
    launcher = _LAUNCHERS.get(key)
    if launcher is None:
        if len(_LAUNCHERS) >= _MAX_LAUNCHERS:
            _LAUNCHERS.clear()
        launcher = _LAUNCHERS[key] = _launcher(op_name, target, spec)
    return launcher


def prepare(op_name: str, arch: str) -> None:
    """Import the in-tree kernels that may serve ``op_name`` on ``arch`` (their compiler with them)
    and hash their source, so that a fresh process's first call, its programs already in the
    compile cache, does not pay that second."""
    for name in kernel_names(BUILTIN, op_name):
        kernel = get_kernel(name)
        if arch in kernel.archs:
            kernel.source_hash  # noqa: B018 - imports the kernel's modules


def clear() -> None:
    """Forget resolved launchers (after registering targets or changing the database)."""
    _LAUNCHERS.clear()
    _warned.clear()


on_change(clear)

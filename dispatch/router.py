"""From (op class, target, call) to a launcher: the hot path of every op call.

The first call of a given shape resolves the target, selects a config and builds the kernel
(logged on the ``tileops.dispatch`` logger); every later call is one dictionary lookup. A route
with cautions (a reference fallback on a GPU, tuning rows passed over) keeps a launcher that
warns on every call, so a warning filter, not this module, decides what is shown once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Optional

from tileops.dispatch.compile_cache import built
from tileops.dispatch.lookup import Selection, select
from tileops.callspec import CallSpec
from tileops.errors import ReferenceFallbackWarning, StrictModeError, TuningRowWarning, strict, warn
from tileops.kernels.base import KernelDef, Launcher
from tileops.kernels.registry import get_kernel
from tileops.targets import BUILTIN, REFERENCE, external, kernel_names, known_targets, on_change

_LAUNCHERS: dict[tuple, Launcher] = {}
_MAX_LAUNCHERS = 4096
log = logging.getLogger("tileops.dispatch")


@dataclass(frozen=True)
class Route:
    """Who serves a call: an in-tree kernel with its config selection, or an external callable."""

    target: str
    kernel: Optional[KernelDef] = None
    selection: Optional[Selection] = None
    implementation: Optional[Callable] = None
    notes: tuple[str, ...] = ()
    fallback: Optional[str] = None

    def cautions(self) -> tuple[tuple[type, str], ...]:
        """The warnings each call on this route gives: the fallback, then each row passed over."""
        rows = self.selection.passed_over if self.selection is not None else ()
        kernel = self.kernel.name if self.kernel is not None else ""
        return ((((ReferenceFallbackWarning, self.fallback),) if self.fallback else ())
                + tuple((TuningRowWarning, f"tuning row for {kernel} passed over: {row}") for row in rows))


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
    fallback = None
    if target is None:
        if spec.device.type == "cuda":
            kernel, refusals = first_accepting(BUILTIN, op_name, spec)
            if kernel is not None:
                return Route(BUILTIN, kernel, select(kernel, spec), notes=tuple(refusals))
            notes = [f"no in-tree kernel serves this call ({'; '.join(refusals) or 'none registered'}); "
                     "the PyTorch reference serves it"]
            fallback = f"{op_name}: {notes[0]}"
        target = REFERENCE
    if target in (BUILTIN, REFERENCE):
        chosen = _in_tree(op_name, target, spec, notes)
        return Route(chosen.target, chosen.kernel, chosen.selection, notes=chosen.notes, fallback=fallback)
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


def _launcher(op_name: str, target: Optional[str], spec: CallSpec) -> Launcher:
    chosen = route(op_name, target, spec)
    if chosen.fallback and strict():
        raise StrictModeError(f"{chosen.fallback} (an error because TILEOPS_STRICT=1)")
    if chosen.implementation is not None:
        launcher = chosen.implementation
        log.info("new launcher: %s (%s) by external target %s", op_name, spec.mode, chosen.target)
    else:
        sel = chosen.selection
        launcher = built(chosen.kernel, sel.config, spec)
        log.info("new launcher: %s (%s) kernel %s config %s from %s", op_name, spec.mode, chosen.kernel.name,
                 sel.config.to_json(), sel.source)
    cautions = chosen.cautions()
    return _cautioned(launcher, cautions) if cautions else launcher


def _cautioned(launcher: Launcher, cautions: tuple[tuple[type, str], ...]) -> Launcher:
    """``launcher``, warning each of ``cautions`` before every launch."""
    def launch(*args):
        for category, message in cautions:
            warn(category, message)
        return launcher(*args)
    return launch


def launcher_for(op_name: str, target: Optional[str], spec: CallSpec) -> Launcher:
    """The launcher for a call; after the first call of a shape, a single dictionary lookup."""
    key = (op_name, target, spec)
    launcher = _LAUNCHERS.get(key)
    if launcher is None:
        if len(_LAUNCHERS) >= _MAX_LAUNCHERS:
            _LAUNCHERS.clear()
        launcher = _LAUNCHERS[key] = _launcher(op_name, target, spec)
    return launcher


def clear() -> None:
    """Forget resolved launchers (after registering targets or changing the database)."""
    _LAUNCHERS.clear()


on_change(clear)

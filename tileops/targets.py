"""Targets: named sets of implementations, one per op class.

``BUILTIN`` names the in-tree TileLang kernels, ``REFERENCE`` the pure-PyTorch semantics that
serve every call on any device. Each of those maps an op class to an ordered list of kernel
names; the first kernel that does not refuse a call serves it, through dispatch. A third party
registers a plain callable per op class instead: it is called with the op's forward arguments.
"""

from __future__ import annotations

from typing import Callable, Optional, Union

BUILTIN = "builtin"
REFERENCE = "reference"

Target = Optional[str]

# op class -> kernel names, tried in order.
_REFERENCE_KERNELS: dict[str, tuple[str, ...]] = {
    "DeltaNetChunkFwdOp": ("reference.deltanet_chunk_fwd",),
    "DeltaNetChunkBwdOp": ("reference.deltanet_chunk_bwd",),
    "DeltaNetRecurrentFwdOp": ("reference.deltanet_recurrent",),
    "DeltaNetFwdOp": ("reference.deltanet_recurrent", "reference.deltanet_chunk"),
    "GDNFwdOp": ("reference.gdn_recurrent", "reference.gdn_chunk"),
    "KDAFwdOp": ("reference.kda_recurrent", "reference.kda_chunk"),
    "GLAChunkFwdOp": ("reference.gla_chunk_fwd",),
    "GLAChunkBwdOp": ("reference.gla_chunk_bwd",),
    "GLARecurrentFwdOp": ("reference.gla_recurrent",),
    "GLAFwdOp": ("reference.gla_recurrent", "reference.gla_chunk"),
}

_BUILTIN_KERNELS: dict[str, tuple[str, ...]] = {
    "GDNFwdOp": ("tl.gdn_decode", "tl.gdn_prefill"),
    "DeltaNetFwdOp": ("tl.deltanet_decode", "tl.deltanet_prefill"),
    "DeltaNetRecurrentFwdOp": ("tl.deltanet_decode",),
    "DeltaNetChunkFwdOp": ("tl.deltanet_chunk_fwd",),
    "DeltaNetChunkBwdOp": ("tl.deltanet_chunk_bwd",),
    "KDAFwdOp": ("tl.kda_decode", "tl.kda_prefill"),
    "GLAFwdOp": ("tl.gla_decode", "tl.gla_prefill"),
    "GLARecurrentFwdOp": ("tl.gla_decode",),
    "GLAChunkFwdOp": ("tl.gla_chunk_fwd",),
    "GLAChunkBwdOp": ("tl.gla_chunk_bwd",),
}

_EXTERNAL: dict[tuple[str, str], Callable] = {}
_LISTENERS: list[Callable[[], None]] = []


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` whenever a target is registered or removed (dispatch forgets routes)."""
    _LISTENERS.append(listener)


def _changed() -> None:
    for listener in _LISTENERS:
        listener()


def register_target(name: str, op: Union[str, type], implementation: Callable) -> None:
    """Serve ``op`` (a class or its name) under target ``name`` with ``implementation``.

    The implementation is called with the op's forward arguments and must return what the
    op's forward returns (GLAChunkFwdOp may also return (o, final_state, h), which attaches h
    for GLAChunkBwdOp). The names ``builtin`` and ``reference`` are reserved.
    """
    op_name = op if isinstance(op, str) else op.__name__
    if name in (BUILTIN, REFERENCE):
        raise ValueError(f"target name {name!r} is reserved; choose another name")
    if not callable(implementation):
        raise TypeError(f"implementation for target {name!r} must be callable, got {type(implementation).__name__}")
    _EXTERNAL[(name, op_name)] = implementation
    _changed()


def unregister_target(name: str, op: Union[str, type]) -> None:
    """Remove a registered third-party implementation (no error if absent)."""
    _EXTERNAL.pop((name, op if isinstance(op, str) else op.__name__), None)
    _changed()


def kernel_names(target: str, op_name: str) -> tuple[str, ...]:
    """The in-tree kernels behind ``target`` for one op class (empty when it has none)."""
    table = _BUILTIN_KERNELS if target == BUILTIN else _REFERENCE_KERNELS if target == REFERENCE else {}
    return table.get(op_name, ())


def external(target: str, op_name: str) -> Optional[Callable]:
    """The third-party implementation registered for (target, op), if any."""
    return _EXTERNAL.get((target, op_name))


def known_targets(op_name: str) -> list[str]:
    """Every target name that can serve ``op_name``."""
    names = [REFERENCE] + ([BUILTIN] if op_name in _BUILTIN_KERNELS else [])
    return names + sorted(n for (n, o) in _EXTERNAL if o == op_name)

"""The base of every op: construct once with what the kernel is compiled with, call with tensors."""

from __future__ import annotations

import inspect
from typing import Any, Optional

import torch

from tileops import library
from tileops.dispatch.router import launcher_for
from tileops.callspec import CallSpec, make_flags
from tileops.device import device_facts
from tileops.targets import Target


SEEN_CALLS = 64  # call signatures an op remembers before it starts over


def call_signature(args: tuple) -> Optional[tuple]:
    """What validation reads from positional arguments: each tensor's shape, dtype and device,
    and plain values as they are; None when an argument is of any other kind, or is a tensor that
    is not a plain one or requires grad (with grad mode on): such calls are never cached."""
    grad = torch.is_grad_enabled()
    out = []
    for arg in args:
        if type(arg) is torch.Tensor:
            if grad and arg.requires_grad:
                return None
            out.append((arg.shape, arg.dtype, arg.device))
        elif arg is None or isinstance(arg, (bool, int, float, str)):
            out.append((type(arg), arg))
        else:
            return None
    return tuple(out)


class Op:
    """An operator. ``forward`` validates, describes the call and hands it to dispatch.

    Subclasses implement ``describe(*args, **kwargs) -> (CallSpec, args)``: every check on the
    arguments and the frozen description of the call, with the arguments in forward's order; and
    ``_fake(*args)``, the outputs' shapes and dtypes for the op's custom op (``tileops.library``).
    An op is configured once, at construction. Validation reads only the arguments' metadata,
    except for packed-sequence offsets, so a repeat of an already-validated signature (same
    shapes, dtypes, devices and plain values; not varlen) reuses its description: the eager
    decode step of a serving loop pays a few microseconds of host time instead of a full check.
    """

    def __init__(self, *, target: Target = None) -> None:
        if target is not None and not isinstance(target, str):
            raise TypeError(f"target must be None, BUILTIN, 'reference' or a registered target name, "
                            f"got {type(target).__name__}")
        self.target = target
        self._seen: dict[tuple, CallSpec] = {}

    def describe(self, *args: Any, **kwargs: Any) -> tuple[CallSpec, tuple]:
        raise NotImplementedError

    def forward(self, *args: Any) -> Any:
        """The call, with every forward argument positional (the subclasses' ``forward`` pass them).

        An eager call that records no gradient runs directly (a repeated signature is one cache
        lookup); a call under torch.compile, torch.export or fx tracing, or one whose inputs
        require grad, goes through the op's ``torch.library`` custom op, whose implementation is
        ``_run`` and whose backward is the reference's.
        """
        if not torch.compiler.is_compiling():
            signature = call_signature(args)
            spec = self._seen.get(signature) if signature is not None else None
            if spec is not None:  # a repeat of a plain call: the hot path
                return launcher_for(type(self).__name__, self.target, spec)(*args)
            if not library.needs_custom_op(args):
                return self._run(*args)
        return library.call(self, args)

    def _run(self, *args: Any) -> Any:
        """Validate, dispatch and launch: the eager call, and the custom op's implementation."""
        signature = call_signature(args)
        spec = self._seen.get(signature) if signature is not None else None
        if spec is None:
            spec, call_args = self.describe(*args)
            if (signature is not None and spec.mode != "varlen" and len(call_args) == len(args)
                    and all(a is b for a, b in zip(call_args, args))):
                if len(self._seen) >= SEEN_CALLS:
                    self._seen.clear()
                self._seen[signature] = spec
        else:
            call_args = args
        return launcher_for(type(self).__name__, self.target, spec)(*call_args)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def _settings(self) -> dict:
        """The constructor arguments this op was built with (by name): what the custom op carries."""
        names = [n for n in inspect.signature(type(self).__init__).parameters if n != "self"]
        return {name: getattr(self, name) for name in names}

    def _fake(self, *args: Any) -> tuple:
        """Empty tensors shaped like the outputs of a call (symbolic sizes allowed): what the
        custom op reports to the compiler without running."""
        raise NotImplementedError


STEP_MODES = frozenset({"decode", "step"})  # one token a sequence: the decode step, which reads g and beta as they come


def gate_dtype(g: torch.Tensor, dtype: torch.dtype) -> Optional[str]:
    """The ``gate_dtype`` flag: g's dtype where it is not the call's (fp32 g in a 16-bit call), else
    None; KDA's and GLA's first pass and every decode step read g in the dtype it comes in."""
    return None if g.dtype == dtype else str(g.dtype).removeprefix("torch.")


def beta_dtype(beta: torch.Tensor, mode: str) -> Optional[str]:
    """The ``beta_dtype`` flag of a decode step: beta's dtype where it is not fp32 (a 16-bit beta in
    a 16-bit call), else None, as for any prefill (it widens beta first, whatever it came in)."""
    return None if beta.dtype == torch.float32 or mode not in STEP_MODES else str(beta.dtype).removeprefix("torch.")


def call_spec(op: str, entry: str, mode: str, like: torch.Tensor, *, batch: int, tokens: int,
              heads: int, value_heads: int, dim_k: int, dim_v: int, **flags: object) -> CallSpec:
    """A CallSpec for a call whose tensors look like ``like`` (dtype and device)."""
    arch, name = device_facts(like.device)
    return CallSpec(op=op, entry=entry, mode=mode, dtype=like.dtype, device=like.device, arch=arch,
                    device_name=name, batch=batch, tokens=tokens, heads=heads, value_heads=value_heads,
                    dim_k=dim_k, dim_v=dim_v, flags=make_flags(**flags))

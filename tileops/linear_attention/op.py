"""The base of every op: construct once with what the kernel is compiled with, call with tensors."""

from __future__ import annotations

from typing import Any

import torch

from dispatch.router import launcher_for
from tileops.callspec import CallSpec, make_flags
from tileops.device import device_facts
from tileops.targets import Target


class Op:
    """An operator. ``forward`` validates, describes the call and hands it to dispatch.

    Subclasses implement ``describe(*args, **kwargs) -> (CallSpec, args)``: every check on the
    arguments and the frozen description of the call, with the arguments in forward's order.
    """

    def __init__(self, *, target: Target = None) -> None:
        if target is not None and not isinstance(target, str):
            raise TypeError(f"target must be None, BUILTIN, 'reference' or a registered target name, "
                            f"got {type(target).__name__}")
        self.target = target

    def describe(self, *args: Any, **kwargs: Any) -> tuple[CallSpec, tuple]:
        raise NotImplementedError

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        spec, call_args = self.describe(*args, **kwargs)
        return launcher_for(type(self).__name__, self.target, spec)(*call_args)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)


def call_spec(op: str, entry: str, mode: str, like: torch.Tensor, *, batch: int, tokens: int,
              heads: int, value_heads: int, dim_k: int, dim_v: int, **flags: object) -> CallSpec:
    """A CallSpec for a call whose tensors look like ``like`` (dtype and device)."""
    arch, name = device_facts(like.device)
    return CallSpec(op=op, entry=entry, mode=mode, dtype=like.dtype, device=like.device, arch=arch,
                    device_name=name, batch=batch, tokens=tokens, heads=heads, value_heads=value_heads,
                    dim_k=dim_k, dim_v=dim_v, flags=make_flags(**flags))

"""What the FLA-style functions share: one op per configuration, the return convention, and
clear refusals of the FLA arguments that have no tileops counterpart."""

from __future__ import annotations

from typing import Any, Optional

import torch

_OPS: dict[tuple, Any] = {}


def op_for(cls: type, **settings: object) -> Any:
    """The op ``cls(**settings)``, built once per distinct configuration."""
    key = (cls, tuple(sorted(settings.items())))
    op = _OPS.get(key)
    if op is None:
        op = _OPS[key] = cls(**settings)
    return op


def returned(o: torch.Tensor, final_state: torch.Tensor,
             output_final_state: bool) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """FLA's convention: (o, final_state), final_state None unless ``output_final_state``."""
    return o, final_state if output_final_state else None


def refuse(function: str, name: str, value: object, supported: object = None) -> None:
    """NotImplementedError naming ``function``'s argument ``name`` unless it is ``supported``."""
    if value is supported or (supported is not None and not isinstance(value, torch.Tensor) and value == supported):
        return
    shown = "a tensor" if isinstance(value, torch.Tensor) else repr(value)
    raise NotImplementedError(f"{function}: {name}={shown} is not supported by tileops (only {name}={supported!r})")


def extra_kwargs(function: str, kwargs: dict, known: tuple[str, ...]) -> dict:
    """The keyword arguments FLA reads from ``**kwargs``; any other name is a TypeError."""
    unknown = sorted(set(kwargs) - set(known))
    if unknown:
        raise TypeError(f"{function}() got unexpected keyword arguments {unknown}; tileops accepts {list(known)}")
    return kwargs


def chunk_size_arg(function: str, kwargs: dict, allowed: tuple[int, ...]) -> None:
    """FLA's ``chunk_size`` keyword, checked as FLA does; tileops chooses its own chunking, which
    changes the speed and not the result."""
    size = kwargs.get("chunk_size", 64)
    if size not in allowed:
        raise ValueError(f"{function}: chunk_size must be one of {allowed}, got {size!r}")


def transposed(state: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """A state in the other layout ([K, V] <-> [V, K]), or None."""
    return None if state is None else state.mT.contiguous()

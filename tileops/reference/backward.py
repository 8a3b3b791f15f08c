"""Gradients of the chunk ops: the vector-Jacobian product of the chunked reference forward.

Inputs are cast to the compute dtype; gradients return in each input's own dtype. The saved
forward tensors (Aw, Au, w, u; h beyond its first entry) are not needed: the forward is recomputed.
``torch.func.vjp`` differentiates it even where autograd is off (inside a custom op's forward).
"""

from __future__ import annotations

from typing import Optional

import torch

from tileops.reference.delta_rule.chunk import chunk_delta_rule
from tileops.reference.gla.chunk import chunk_gla
from tileops.reference.precision import compute_dtype


def _vjp(forward, originals: tuple[torch.Tensor, ...], cotangents: tuple[Optional[torch.Tensor], ...]
         ) -> tuple[torch.Tensor, ...]:
    """The vector-Jacobian product of ``forward`` (taking the inputs in the compute dtype) at
    ``originals``; a None cotangent is zero. Each gradient is in its original's dtype."""
    inputs = [t.detach().to(compute_dtype(t.dtype)) for t in originals]
    outputs, vjp = torch.func.vjp(forward, *inputs)
    cotangents = tuple(torch.zeros_like(o) if c is None else c.to(o.dtype) for o, c in zip(outputs, cotangents))
    return tuple(d.to(orig.dtype) for d, orig in zip(vjp(cotangents), originals))


def deltanet_chunk_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            beta: torch.Tensor, S: torch.Tensor, *,
                            chunk_size: int) -> tuple[torch.Tensor, ...]:
    """(dq, dk, dv, dbeta) of DeltaNetChunkFwdOp's o, BHSD layout, no query scale.

    The forward starts from S[:, :, 0] (the boundary states of the forward pass).
    """
    def forward(q, k, v, beta):
        o, _ = chunk_delta_rule(*(x.transpose(1, 2) for x in (q, k, v, beta)), scale=1.0,
                                initial_state=S[:, :, 0], chunk_size=chunk_size)
        return (o,)

    return _vjp(forward, (q, k, v, beta), (do.transpose(1, 2),))


def gla_chunk_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, h: torch.Tensor,
                       do: torch.Tensor, dht: Optional[torch.Tensor], *, scale: float, chunk_size: int,
                       has_initial_state: bool) -> tuple[torch.Tensor, ...]:
    """(dq, dk, dv, dg) of GLA's (o, final_state) with cotangents (do, dht), BTHD layout.

    The forward starts from h[:, 0] when ``has_initial_state``, else from zeros; dht None means
    the final state does not feed the loss.
    """
    def forward(q, k, v, g):
        o, final_state, _ = chunk_gla(q, k, v, g, scale=scale, chunk_size=chunk_size,
                                      initial_state=h[:, 0] if has_initial_state else None)
        return o, final_state

    return _vjp(forward, (q, k, v, g), (do, dht))

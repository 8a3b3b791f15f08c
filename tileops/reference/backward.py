"""Gradients of the chunk ops: torch.autograd through the chunked reference forward.

Inputs become leaves in the compute dtype; gradients return in each input's own dtype. The saved
forward tensors (Aw, Au, w, u; h beyond its first entry) are not needed: the forward is recomputed.
"""

from __future__ import annotations

from typing import Optional

import torch

from tileops.reference.delta_rule.chunk import chunk_delta_rule
from tileops.reference.gla.chunk import chunk_gla
from tileops.reference.precision import compute_dtype


def _leaves(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().to(compute_dtype(t.dtype)).requires_grad_() for t in tensors]


def _grads(outputs: list[tuple[torch.Tensor, Optional[torch.Tensor]]], inputs: list[torch.Tensor],
           originals: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """∂(Σ output · cotangent)/∂inputs, each in the dtype of the matching original."""
    loss = sum((out * cot.to(out.dtype)).sum() for out, cot in outputs if cot is not None)
    grads = torch.autograd.grad(loss, inputs)
    return tuple(d.to(orig.dtype) for d, orig in zip(grads, originals))


def deltanet_chunk_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            beta: torch.Tensor, S: torch.Tensor, *,
                            chunk_size: int) -> tuple[torch.Tensor, ...]:
    """(dq, dk, dv, dbeta) of DeltaNetChunkFwdOp's o, BHSD layout, no query scale.

    The forward starts from S[:, :, 0] (the boundary states of the forward pass).
    """
    originals = (q, k, v, beta)
    inputs = _leaves(*originals)
    with torch.enable_grad():
        o, _ = chunk_delta_rule(*(x.transpose(1, 2) for x in inputs), scale=1.0,
                                initial_state=S[:, :, 0], chunk_size=chunk_size)
        return _grads([(o, do.transpose(1, 2))], inputs, originals)


def gla_chunk_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, h: torch.Tensor,
                       do: torch.Tensor, dht: Optional[torch.Tensor], *, scale: float, chunk_size: int,
                       has_initial_state: bool) -> tuple[torch.Tensor, ...]:
    """(dq, dk, dv, dg) of GLA's (o, final_state) with cotangents (do, dht), BTHD layout.

    The forward starts from h[:, 0] when ``has_initial_state``, else from zeros; dht None means
    the final state does not feed the loss.
    """
    originals = (q, k, v, g)
    inputs = _leaves(*originals)
    with torch.enable_grad():
        o, final_state, _ = chunk_gla(*inputs, scale=scale, chunk_size=chunk_size,
                                      initial_state=h[:, 0] if has_initial_state else None)
        return _grads([(o, do), (final_state, dht)], inputs, originals)

"""FLA's ``chunk_gla`` and ``fused_recurrent_gla`` on GLAFwdOp; a training call (an input that
requires grad, equal lengths of whole 64-token chunks, no initial state) on GLAChunkFwdOp, whose
gradient is GLAChunkBwdOp's kernels."""

from __future__ import annotations

from typing import Optional

import torch

from tileops.functional.common import extra_kwargs, op_for, refuse, returned, transposed
from tileops.linear_attention import GLAChunkFwdOp, GLAFwdOp

CHUNK = 64  # GLAChunkFwdOp's chunk, whose in-tree kernels take whole chunks


def _trains(tensors: tuple, initial_state: Optional[torch.Tensor], *offsets: Optional[torch.Tensor]) -> bool:
    """Whether a call is a training call the chunked ops serve with their kernels both ways."""
    return (torch.is_grad_enabled() and any(t.requires_grad for t in tensors) and initial_state is None
            and all(x is None for x in offsets) and tensors[0].shape[1] % CHUNK == 0)


def _gla(q, k, v, g, scale, initial_state, output_final_state, state_v_first, cu_seqlens, cu_seqlens_cpu):
    op = op_for(GLAFwdOp, scale=scale)  # checks the scale for either route
    if _trains((q, k, v, g), initial_state, cu_seqlens, cu_seqlens_cpu):
        o, final_state = op_for(GLAChunkFwdOp, chunk_size=CHUNK, scale=-1.0 if scale is None else scale)(q, k, v, g)
        return returned(o, transposed(final_state) if state_v_first else final_state, output_final_state)
    if state_v_first:
        initial_state = transposed(initial_state)
    o, final_state = op(q, k, v, g, initial_state, cu_seqlens, cu_seqlens_cpu)
    return returned(o, transposed(final_state) if state_v_first else final_state, output_final_state)


def chunk_gla(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, scale: Optional[int] = None,
              initial_state: torch.Tensor = None, output_final_state: bool = False, state_v_first: bool = False,
              cu_seqlens: Optional[torch.LongTensor] = None, cu_seqlens_cpu: Optional[torch.LongTensor] = None
              ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Gated linear attention with per-key log decays g [B, T, H, K]: (o, final_state or None)."""
    return _gla(q, k, v, g, scale, initial_state, output_final_state, state_v_first, cu_seqlens, cu_seqlens_cpu)


def fused_recurrent_gla(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gk: Optional[torch.Tensor] = None,
                        gv: Optional[torch.Tensor] = None, scale: Optional[int] = None,
                        initial_state: Optional[torch.Tensor] = None, output_final_state: bool = False,
                        reverse: bool = False, state_v_first: bool = False,
                        cu_seqlens: Optional[torch.LongTensor] = None, **kwargs
                        ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """As ``chunk_gla`` with the key gate named ``gk`` (None: no decay); value gates and the
    reversed recurrence are refused."""
    extra_kwargs("fused_recurrent_gla", kwargs, ())
    refuse("fused_recurrent_gla", "gv", gv)
    refuse("fused_recurrent_gla", "reverse", reverse, False)
    if gk is None:
        gk = q.new_zeros(q.shape)
    return _gla(q, k, v, gk, scale, initial_state, output_final_state, state_v_first, cu_seqlens, None)

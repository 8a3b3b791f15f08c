"""FLA's ``chunk_delta_rule`` and ``fused_recurrent_delta_rule`` on DeltaNetFwdOp."""

from __future__ import annotations

from typing import Optional

import torch

from tileops.functional.common import chunk_size_arg, extra_kwargs, op_for, returned
from tileops.linear_attention import DeltaNetFwdOp


def chunk_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                     scale: Optional[float] = None, initial_state: Optional[torch.Tensor] = None,
                     output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                     cu_seqlens: Optional[torch.LongTensor] = None, cu_seqlens_cpu: Optional[torch.LongTensor] = None,
                     **kwargs) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The ungated delta rule over [B, T, H, *] tokens: (o, final_state or None)."""
    chunk_size_arg("chunk_delta_rule", extra_kwargs("chunk_delta_rule", kwargs, ("chunk_size",)), (16, 32, 64))
    op = op_for(DeltaNetFwdOp, scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
    return returned(*op(q, k, v, beta, initial_state, cu_seqlens, cu_seqlens_cpu), output_final_state)


def fused_recurrent_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor = None,
                               scale: float = None, initial_state: torch.Tensor = None,
                               output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                               cu_seqlens: Optional[torch.LongTensor] = None
                               ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """As ``chunk_delta_rule``; ``beta`` None means 1 for every token."""
    if beta is None:
        beta = v.new_ones(v.shape[:3])
    op = op_for(DeltaNetFwdOp, scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
    return returned(*op(q, k, v, beta, initial_state, cu_seqlens), output_final_state)

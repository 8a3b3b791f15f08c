"""Gated linear attention as the definition: the delta-rule recurrence without the delta rule.

S_t = diag(exp(g_t)) S_{t−1} + k_t v_tᵀ,  o_t = S_tᵀ (scale · q_t).
"""

from __future__ import annotations

from typing import Optional

import torch

from tileops.reference.delta_rule.naive import delta_rule_step, recurrent_delta_rule


def recurrent_gla(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, *, scale: float,
                  initial_state: Optional[torch.Tensor] = None,
                  cu_seqlens: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(o [B, T, H, V], final_state [N, H, K, V]) for g [B, T, H, K] log decays per key channel."""
    return recurrent_delta_rule(q, k, v, None, g, scale=scale, initial_state=initial_state,
                                cu_seqlens=cu_seqlens)


def gla_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gk: torch.Tensor, state: torch.Tensor, *,
             scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step, [B, H, dim] layout: S_new = diag(exp(gk)) S + k vᵀ, o = scale · S_newᵀ q."""
    return delta_rule_step(q, k, v, None, state, gk, scale=scale)

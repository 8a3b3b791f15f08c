"""The definition: the delta rule (and its gated and GLA variants) token by token.

Per sequence and value head, with key-major state S [K, V]:
    S' = exp(g_t) ⊙ S                  (scalar decay, or one per key row)
    δ  = β_t (v_t − S'ᵀ k_t)           (δ = v_t when beta is None: GLA)
    S  = S' + k_t δᵀ
    o_t = Sᵀ q_t                        (q already multiplied by ``scale``)
"""

from __future__ import annotations

from typing import Optional

import torch

from tileops.reference.sequences import Batch, pack


def _recur(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the recurrence over the rows of a batch: (o [N, HV, L, V], final state [N, HV, K, V])."""
    state = batch.state
    outputs = []
    for t in range(batch.q.shape[2]):
        k_t = batch.k[:, :, t].unsqueeze(-2)
        if batch.g is not None:
            state = state * batch.g[:, :, t].exp().unsqueeze(-1)
        delta = batch.v[:, :, t].unsqueeze(-2)
        if batch.beta is not None:
            delta = batch.beta[:, :, t, None, None] * (delta - k_t @ state)
        state = state + k_t.mT @ delta
        outputs.append((batch.q[:, :, t].unsqueeze(-2) @ state).squeeze(-2))
    return torch.stack(outputs, 2), state


def recurrent_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         beta: Optional[torch.Tensor] = None, g: Optional[torch.Tensor] = None, *,
                         scale: float, initial_state: Optional[torch.Tensor] = None,
                         cu_seqlens: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference recurrence: (o [B, T, HV, V] in q's dtype, final_state [N, HV, K, V]).

    q, k [B, T, H, K]; v [B, T, HV, V], value head j reading query/key head j // (HV // H);
    beta [B, T, HV] or None (GLA: no delta rule); g None (DeltaNet), [B, T, HV] (GDN) or
    [B, T, HV, K] (KDA, GLA): log decays. initial_state [N, HV, K, V] or None (zeros).
    cu_seqlens [N + 1] with B == 1 packs N sequences, each with its own state; without it N = B.
    No input transform is applied here. The state is in the compute dtype (float32, or float64).
    """
    batch = pack(q, k, v, beta, g, scale=scale, initial_state=initial_state, cu_seqlens=cu_seqlens)
    o, state = _recur(batch)
    return batch.unpack(o, q.dtype), state


def delta_rule_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: Optional[torch.Tensor],
                    state: torch.Tensor, g: Optional[torch.Tensor] = None, *,
                    scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step in [B, H, dim] layout: (o [B, HV, V], new_state [B, HV, K, V]).

    The recurrence above for a single token: beta [B, HV] or None, g None, [B, HV] or
    [B, HV, K], state [B, HV, K, V]. With scale 1 and no gate this is DeltaNet's decode,
    o = S_newᵀ q = Sᵀq + (q·k) δ.
    """
    def token(x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        return None if x is None else x.unsqueeze(1)

    o, new_state = recurrent_delta_rule(token(q), token(k), token(v), token(beta), token(g),
                                        scale=scale, initial_state=state)
    return o.squeeze(1), new_state

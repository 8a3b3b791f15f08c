"""Gated linear attention in chunks: the chunked delta-rule form with Δ = V (no A, T or W).

Per chunk: O = (Q⊙e^γ) S0 + (causal (Q⊙e^{γ_i−γ_j})Kᵀ) V and S_C = diag(e^{γ_C}) S0 + (K⊙e^{γ_C−γ})ᵀ V.
"""

from __future__ import annotations

from typing import Optional

import torch

from tileops.reference.delta_rule.chunk import scan_chunks
from tileops.reference.delta_rule.intra import SUBCHUNK
from tileops.reference.sequences import pack


def chunk_gla(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, *, scale: float,
              initial_state: Optional[torch.Tensor] = None, cu_seqlens: Optional[torch.Tensor] = None,
              chunk_size: int = 64,
              subchunk: int = SUBCHUNK) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """(o [B, T, H, V] in q's dtype, final_state [N, H, K, V], h) for g [B, T, H, K].

    h [B, NT + 1, H, K, V] (NT = ceil(T / chunk_size)) holds the state entering each chunk, then
    the final state, in the compute dtype; it is None for packed varlen calls. ``subchunk``
    changes the speed, not the result (see ``decayed_products``).
    """
    batch = pack(q, k, v, None, g, scale=scale, initial_state=initial_state, cu_seqlens=cu_seqlens,
                 multiple=chunk_size)
    scan = scan_chunks(batch, chunk_size=chunk_size, subchunk=subchunk)
    h = None if cu_seqlens is not None else scan.states.transpose(1, 2).contiguous()
    return batch.unpack(scan.o, q.dtype), scan.states[:, :, -1], h

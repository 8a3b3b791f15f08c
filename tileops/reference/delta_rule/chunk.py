"""The delta rule in chunks, computed the way the GPU kernels do (see the math note).

Per chunk of C tokens, with γ the in-chunk cumulative log decay and S0 the entering state:
A_ij = β_i Σ_k k_ik k_jk e^{γ_ik−γ_jk} (j < i), T = (I + A)⁻¹, U = T(β⊙V), W = T(β⊙e^γ⊙K),
Δ = U − W S0, O = (Q⊙e^γ) S0 + (causal QKᵀ with decays) Δ, S_C = e^{γ_C} S0 + (K⊙e^{γ_C−γ})ᵀ Δ.
Without beta (GLA) there is no A, T or W and Δ = V. Everything but the S0 chain is computed for
all chunks at once; the chain runs chunk by chunk. A log decay of −inf is an exact reset
(``decay.Decays``).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from tileops.reference.delta_rule.decay import Decays
from tileops.reference.delta_rule.intra import SUBCHUNK, Solve, decayed_products, unit_lower_inverse
from tileops.reference.sequences import Batch, pack


class ChunkScan(NamedTuple):
    """What the chunked form computes for a batch of N rows, HV heads, NC chunks of C tokens.

    o [N, HV, NC·C, V]; states [N, HV, NC + 1, K, V]: the state entering each chunk, then the
    final one. With the delta rule: inverse T [N, HV, NC, C, C], w [N, HV, NC, C, K] and
    u [N, HV, NC, C, V]; without it (GLA) inverse and w are None and u is V.
    """

    o: torch.Tensor
    states: torch.Tensor
    inverse: Optional[torch.Tensor]
    w: Optional[torch.Tensor]
    u: torch.Tensor


def scan_chunks(batch: Batch, *, chunk_size: int, solve: Solve = "triangular",
                subchunk: int = SUBCHUNK) -> ChunkScan:
    """The chunked form over a batch whose length is a multiple of ``chunk_size``."""
    def chunks(x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(2, (-1, chunk_size))

    q, k, v = chunks(batch.q), chunks(batch.k), chunks(batch.v)
    gamma = None if batch.g is None else Decays.cumulative(chunks(batch.g))
    if gamma is None:
        from_start, k_to_end, chunk_decay = 1, k, None
    else:
        last = gamma[..., -1:, :]
        from_start = gamma.from_start().exp()
        k_to_end = k * last.since(gamma).exp()
        chunk_decay = last.from_start().mT.exp()
    q_decayed = q * from_start

    inverse = w = None
    u = v
    if batch.beta is None:
        attention = decayed_products(q, k, gamma, subchunk=subchunk)
    else:
        beta = chunks(batch.beta).unsqueeze(-1)
        attention, a = decayed_products(torch.stack([q, beta * k]), k, gamma, subchunk=subchunk).unbind(0)
        inverse = unit_lower_inverse(a.tril(-1), solve)
        u = inverse @ (beta * v)
        w = inverse @ (beta * from_start * k)

    state = batch.state
    states, outputs = [state], []
    for c in range(q.shape[2]):
        delta = u[:, :, c] if w is None else u[:, :, c] - w[:, :, c] @ state
        outputs.append(q_decayed[:, :, c] @ state + attention[:, :, c] @ delta)
        if chunk_decay is not None:
            state = chunk_decay[:, :, c] * state
        state = state + k_to_end[:, :, c].mT @ delta
        states.append(state)
    return ChunkScan(o=torch.cat(outputs, 2), states=torch.stack(states, 2), inverse=inverse, w=w, u=u)


def chunk_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     beta: Optional[torch.Tensor] = None, g: Optional[torch.Tensor] = None, *,
                     scale: float, initial_state: Optional[torch.Tensor] = None,
                     cu_seqlens: Optional[torch.Tensor] = None, chunk_size: int = 64,
                     solve: Solve = "triangular", subchunk: int = SUBCHUNK) -> tuple[torch.Tensor, torch.Tensor]:
    """``recurrent_delta_rule`` computed in chunks: same arguments, same (o, final_state).

    The knobs change the speed, not the result: ``chunk_size`` (any ≥ 1; the tail chunk is
    zero-padded), ``solve`` (how T is formed, see ``unit_lower_inverse``) and ``subchunk`` (the
    block of pairwise decays with a per-channel gate, see ``decayed_products``).
    """
    batch = pack(q, k, v, beta, g, scale=scale, initial_state=initial_state, cu_seqlens=cu_seqlens,
                 multiple=chunk_size)
    scan = scan_chunks(batch, chunk_size=chunk_size, solve=solve, subchunk=subchunk)
    return batch.unpack(scan.o, q.dtype), scan.states[:, :, -1]


def deltanet_chunk_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, *,
                           chunk_size: int) -> tuple[torch.Tensor, ...]:
    """DeltaNetChunkFwdOp's outputs (o, S, Aw, Au, w, u) in BHSD layout, no query scale, zero state.

    q, k [B, H, S, DK]; v [B, H, S, DV]; beta [B, H, S]. S [B, H, NC + 1, DK, DV] holds the
    boundary states (S[:, :, 0] the zero initial state, S[:, :, NC] the final one) in the compute
    dtype. Aw and Au [B, H, S, BC] are the per-chunk (I + A)⁻¹ stacked along S (equal without a
    gate, returned as two tensors); w = Aw·(β⊙k) [B, H, S, DK] and u = Au·(β⊙v) [B, H, S, DV].
    o, Aw, Au, w and u are in the input dtype. NC = ceil(S / BC); the tail chunk is zero-padded,
    so its rows of Aw/Au are zero past the sequence end.
    """
    length = q.shape[2]
    batch = pack(*(x.transpose(1, 2) for x in (q, k, v, beta)), None, scale=1.0, initial_state=None,
                 cu_seqlens=None, multiple=chunk_size)
    scan = scan_chunks(batch, chunk_size=chunk_size)

    def per_token(x: torch.Tensor) -> torch.Tensor:
        return x.flatten(2, 3)[:, :, :length].to(q.dtype)

    a_inv = per_token(scan.inverse)
    return (scan.o[:, :, :length].to(q.dtype), scan.states, a_inv, a_inv.clone(),
            per_token(scan.w), per_token(scan.u))

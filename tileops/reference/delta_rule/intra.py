"""Intra-chunk pieces of the chunked form: decayed key products and the unit lower inverse.

Every decay is exp(γ_i − γ_j) with i ≥ j (later minus earlier cumulative log decay), or a product
of two such factors, so no exponent is positive and nothing overflows, however long the chunk.
Positions above the diagonal get −inf in the exponent before the exponential, and so do pairs
with a full reset between them (see ``decay.Decays``).
"""

from __future__ import annotations

from typing import Literal, Optional

import torch

from tileops.reference.delta_rule.decay import Decays

Solve = Literal["triangular", "substitution"]

# The default sub-chunk of pairwise decays under a per-channel gate.
SUBCHUNK = 8


def _above_diagonal(size: int, device: torch.device) -> torch.Tensor:
    return torch.ones(size, size, dtype=torch.bool, device=device).triu(1)


def _pairwise(x: torch.Tensor, y: torch.Tensor, gamma: Decays) -> torch.Tensor:
    """Σ_k x_ik y_jk exp(γ_ik − γ_jk) for j ≤ i, zero above, with a decay formed for every (i, j, k)."""
    above = _above_diagonal(x.shape[-2], x.device).unsqueeze(-1)
    exponent = gamma.unsqueeze(-2).since(gamma.unsqueeze(-3)).masked_fill(above, float("-inf"))
    return (x.unsqueeze(-2) * y.unsqueeze(-3) * exponent.exp()).sum(-1)


def _per_channel_products(x: torch.Tensor, y: torch.Tensor, gamma: Decays, subchunk: int) -> torch.Tensor:
    """The per-channel decayed products, sub-chunk by sub-chunk.

    Rows i of the sub-chunk starting at r meet earlier columns j < r through one GEMM of
    x_i ⊙ e^{γ_i − γ_r} and y_j ⊙ e^{γ_r − γ_j}: both exponents pair a later position with an
    earlier one, so neither is positive. Inside the sub-chunk the decays are formed pairwise.
    """
    size = x.shape[-2]
    rows = []
    for start in range(0, size, subchunk):
        stop = min(start + subchunk, size)
        x_rows, gamma_rows = x[..., start:stop, :], gamma[..., start:stop, :]
        ref = gamma[..., start:start + 1, :]
        earlier = (x_rows * gamma_rows.since(ref).exp()) @ (y[..., :start, :] * ref.since(gamma[..., :start, :]).exp()).mT
        own = _pairwise(x_rows, y[..., start:stop, :], gamma_rows)
        later = own.new_zeros(own.shape[:-1] + (size - stop,))
        rows.append(torch.cat([earlier, own, later], -1))
    return torch.cat(rows, -2)


def decayed_products(x: torch.Tensor, y: torch.Tensor, gamma: Optional[Decays], *,
                     subchunk: int = SUBCHUNK) -> torch.Tensor:
    """M_ij = Σ_k x_ik y_jk exp(γ_ik − γ_jk) for j ≤ i, zero above: [..., C, C].

    x [..., C, D] (it may carry extra leading dimensions, to share the decays between several
    left operands); y [..., C, D]; gamma of shape [..., C, 1] (one decay per position: a GEMM times a C×C
    decay), [..., C, D] (per channel: the decay sits inside the dot product; see
    ``_per_channel_products``, ``subchunk`` ≥ C forms every decay pairwise) or None.
    """
    if gamma is None:
        return (x @ y.mT).tril()
    if gamma.shape[-1] == 1:
        above = _above_diagonal(x.shape[-2], x.device)
        return (x @ y.mT) * gamma.since(gamma.mT).masked_fill(above, float("-inf")).exp()
    return _per_channel_products(x, y, gamma, subchunk)


def unit_lower_inverse(a: torch.Tensor, solve: Solve = "triangular") -> torch.Tensor:
    """(I + a)⁻¹ for strictly lower triangular a [..., C, C].

    ``triangular`` is one batched triangular solve; ``substitution`` is forward substitution,
    row i = e_i − Σ_{j<i} a_ij row_j, vectorised over every chunk and head: C small steps.
    """
    size = a.shape[-1]
    eye = torch.eye(size, dtype=a.dtype, device=a.device)
    if solve == "triangular":
        return torch.linalg.solve_triangular(eye + a, eye.expand_as(a), upper=False, unitriangular=True)
    if solve != "substitution":
        raise ValueError(f"solve must be 'triangular' or 'substitution', got {solve!r}")
    rows = [eye[0].expand(a.shape[:-1])]
    for i in range(1, size):
        done = torch.stack(rows, -2)
        rows.append(eye[i] - (a[..., i:i + 1, :i] @ done).squeeze(-2))
    return torch.stack(rows, -2)

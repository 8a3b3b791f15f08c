"""Input transforms the inference ops may apply before the recurrence: L2 norm, beta and gates.

Each returns its result in the compute dtype (see ``precision``), so a fused GPU kernel that
never rounds the transformed value back to bf16 is checked against the same numbers.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from tileops.reference.precision import compute_dtype


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x · rsqrt(Σ x² + eps) over the last dimension."""
    x = x.to(compute_dtype(x.dtype))
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + eps)


def beta_transform(beta: torch.Tensor, *, sigmoid: bool, neg_eigval: bool) -> torch.Tensor:
    """The update strength: beta as given, sigmoid(beta), or 2·sigmoid(beta) with ``neg_eigval``.

    ``neg_eigval`` widens the range to (0, 2), so I − βkkᵀ may have a negative eigenvalue; it is
    only meaningful on logits, hence it requires ``sigmoid``.
    """
    if neg_eigval and not sigmoid:
        raise ValueError("neg_eigval (allow_neg_eigval) needs sigmoid (use_beta_sigmoid_in_kernel)")
    beta = beta.to(compute_dtype(beta.dtype))
    if not sigmoid:
        return beta
    return 2 * torch.sigmoid(beta) if neg_eigval else torch.sigmoid(beta)


# Below this, softplus(x) = e^x to working precision, so log(softplus(x)) = x.
_SOFTPLUS_EXP_BELOW = -20.0


def log_softplus(x: torch.Tensor) -> torch.Tensor:
    """log(softplus(x)), finite where softplus(x) itself underflows to 0."""
    small = x < _SOFTPLUS_EXP_BELOW
    return torch.where(small, x, F.softplus(x.masked_fill(small, 0)).log())


def scaled_softplus_decay(log_rate: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """−exp(log_rate)·softplus(x), formed as −exp(log_rate + log softplus(x)) so that a huge rate
    never meets an underflowed softplus as inf · 0 = NaN: the result is finite, or −inf (a full
    reset) where the decay really is beyond the dtype's range."""
    return -(log_rate + log_softplus(x)).exp()


def gdn_gate(g: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor) -> torch.Tensor:
    """The GDN log decay −exp(A_log)·softplus(g + dt_bias), one scalar per value head.

    g is the raw gate [B, T, HV]; A_log and dt_bias are [HV].
    """
    dtype = compute_dtype(g.dtype)
    return scaled_softplus_decay(A_log.to(dtype), g.to(dtype) + dt_bias.to(dtype))


def kda_gate(g: torch.Tensor, A_log: torch.Tensor, dt_bias: Optional[torch.Tensor],
             lower_bound: Optional[float] = None) -> torch.Tensor:
    """The KDA log decay per key channel, from the raw gate g [B, T, HV, K].

    A_log is [HV]; dt_bias is [HV·K] or None (zero). With x = g + dt_bias:
    - without ``lower_bound``: −exp(A_log) · softplus(x);
    - with ``lower_bound`` (a negative float): lower_bound · sigmoid(exp(A_log) · x), which keeps
      every log decay inside (lower_bound, 0).
    """
    dtype = compute_dtype(g.dtype)
    heads, dim_k = g.shape[-2:]
    x = g.to(dtype)
    if dt_bias is not None:
        x = x + dt_bias.to(dtype).view(heads, dim_k)
    log_rate = A_log.to(dtype).view(heads, 1)
    if lower_bound is None:
        return scaled_softplus_decay(log_rate, x)
    # exp(A_log) may overflow to inf: a zero x then stays zero (inf · 0 would be NaN).
    zero = x == 0
    return lower_bound * torch.sigmoid(torch.where(zero, 0, log_rate.exp() * x.masked_fill(zero, 1)))

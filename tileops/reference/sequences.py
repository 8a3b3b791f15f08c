"""One call's tokens as a padded, head-major batch of sequences: the form every reference form runs on.

Equal-length calls keep their N = B rows; packed varlen calls (B == 1, ``cu_seqlens``) get one row
per sequence. Rows are zero-padded at the end to a common length. A padding token has zero key,
value, beta and log decay, so it leaves the state unchanged and its output is dropped: the final
state of each row is its sequence's final state, whatever the padding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from tileops.reference.precision import compute_dtype

Spans = Optional[tuple[tuple[int, int], ...]]


@dataclass(frozen=True)
class Batch:
    """Inputs in the compute dtype, N rows padded to length L, value heads HV.

    q, k [N, HV, L, K] (q scaled, query/key heads repeated to HV); v [N, HV, L, V];
    beta [N, HV, L] or None (no delta rule); g [N, HV, L, 1] (scalar decay), [N, HV, L, K]
    (per key channel) or None; state [N, HV, K, V]. ``spans`` holds the (start, end) of each
    packed sequence, or None for equal length ``length``.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    beta: Optional[torch.Tensor]
    g: Optional[torch.Tensor]
    state: torch.Tensor
    spans: Spans
    length: int

    def unpack(self, o: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Per-token outputs [N, HV, L, V] back to the call's layout [B, T, HV, V] in ``dtype``."""
        o = o.transpose(1, 2)
        if self.spans is None:
            return o[:, :self.length].to(dtype)
        return torch.cat([o[n, :end - start] for n, (start, end) in enumerate(self.spans)]).unsqueeze(0).to(dtype)


def _spans(cu_seqlens: torch.Tensor, batch: int) -> Spans:
    if batch != 1:
        raise ValueError(f"packed varlen (cu_seqlens) needs batch size 1, got {batch}")
    bounds = [int(b) for b in cu_seqlens.tolist()]
    return tuple(zip(bounds[:-1], bounds[1:]))


def _pad_rows(x: torch.Tensor, spans: Spans, length: int) -> torch.Tensor:
    """[B, T, ...] to [N, length, ...]: each row one sequence, zeros after its end."""
    if spans is None:
        return F.pad(x, (0, 0) * (x.dim() - 2) + (0, length - x.shape[1]))
    rows = x.new_zeros((len(spans), length) + x.shape[2:])
    for n, (start, end) in enumerate(spans):
        rows[n, :end - start] = x[0, start:end]
    return rows


def pack(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: Optional[torch.Tensor],
         g: Optional[torch.Tensor], *, scale: float, initial_state: Optional[torch.Tensor],
         cu_seqlens: Optional[torch.Tensor], multiple: int = 1) -> Batch:
    """The batch of a call in [B, T, heads, dim] layout, rows padded to a multiple of ``multiple``.

    q, k [B, T, H, K]; v [B, T, HV, V]; beta [B, T, HV] or None; g [B, T, HV] or [B, T, HV, K] or
    None; initial_state [N, HV, K, V] or None (zeros).
    """
    dtype = compute_dtype(q.dtype)
    spans = None if cu_seqlens is None else _spans(cu_seqlens, q.shape[0])
    longest = q.shape[1] if spans is None else max(end - start for start, end in spans)
    length = math.ceil(longest / multiple) * multiple
    value_heads = v.shape[2]
    group = value_heads // q.shape[2]

    def rows(x: Optional[torch.Tensor], repeat: int = 1) -> Optional[torch.Tensor]:
        if x is None:
            return None
        x = _pad_rows(x.to(dtype), spans, length).transpose(1, 2)
        return x if repeat == 1 else x.repeat_interleave(repeat, 1)

    if g is not None and g.dim() == 3:
        g = g.unsqueeze(-1)
    n_rows = q.shape[0] if spans is None else len(spans)
    if initial_state is None:
        state = q.new_zeros((n_rows, value_heads, q.shape[-1], v.shape[-1]), dtype=dtype)
    else:
        state = initial_state.to(dtype)
    return Batch(q=rows(q, group) * scale, k=rows(k, group), v=rows(v), beta=rows(beta), g=rows(g),
                 state=state, spans=spans, length=q.shape[1])

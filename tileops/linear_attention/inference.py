"""Checks shared by the inference ops (DeltaNetFwdOp, GDNFwdOp, KDAFwdOp, GLAFwdOp): BTHD tokens,
packed varlen, and the caller-owned recurrent state."""

from __future__ import annotations

from typing import Optional

import torch

from tileops.linear_attention.validate import FLOATS, Shapes, check_varlen, require, state_dtypes


def check_tokens(shapes: Shapes, q: object, k: object, v: object, *, value_heads: str) -> torch.dtype:
    """q, k [B, T, H, K] and v [B, T, HV, V] of one float dtype; HV a multiple of H.

    ``value_heads`` is "HV" where the op allows grouped value heads and "H" where it does not.
    """
    shapes.tensor("q", q, ["B", "T", "H", "K"], FLOATS)
    shapes.tensor("k", k, ["B", "T", "H", "K"], (q.dtype,))
    shapes.tensor("v", v, ["B", "T", value_heads, "V"], (q.dtype,))
    sizes = shapes.sizes
    require(sizes["T"] >= 1, "q has no tokens (T = 0)")
    require(min(sizes["B"], sizes["H"], sizes["K"], sizes["V"]) >= 1, f"empty q or v: {list(q.shape)}, {list(v.shape)}")
    if value_heads == "HV":
        require(sizes["HV"] % sizes["H"] == 0,
                f"v has HV = {sizes['HV']} heads, which is not a multiple of the H = {sizes['H']} heads of q and k")
    return q.dtype


def check_sequences(shapes: Shapes, cu_seqlens: object, cu_seqlens_cpu: object) -> tuple[int, str]:
    """(N, mode): the number of sequences and prefill / varlen / decode."""
    n = check_varlen(shapes, cu_seqlens, cu_seqlens_cpu)
    shapes.bind("N", n, "cu_seqlens" if cu_seqlens is not None else "q (N = B)")
    if cu_seqlens is not None:
        return n, "varlen"
    return n, "decode" if shapes.sizes["T"] == 1 else "prefill"


def check_state(shapes: Shapes, name: str, state: object, dtype: torch.dtype, *, heads: str,
                state_v_first: bool) -> Optional[torch.Tensor]:
    """An optional fp32 state [N, HV, K, V] (key-major) or [N, HV, V, K] (state_v_first)."""
    if state is None:
        return None
    layout = ["N", heads, "V", "K"] if state_v_first else ["N", heads, "K", "V"]
    try:
        return shapes.tensor(name, state, layout, state_dtypes(dtype))
    except ValueError as err:
        kind = "value-major (state_v_first=True)" if state_v_first else "key-major (state_v_first=False)"
        expected = [shapes.sizes.get(d, d) for d in layout]
        raise ValueError(f"{err}; {name} must be {kind} [{', '.join(layout)}] = {expected}") from None


def fake_outputs(q: torch.Tensor, v: torch.Tensor, cu_seqlens: Optional[torch.Tensor], *,
                 state_v_first: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Empty (o [B, T, HV, V] in q's dtype, final_state [N, HV, K, V] or [N, HV, V, K]) of a call."""
    n = v.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    heads, dim_k, dim_v = v.shape[2], q.shape[3], v.shape[3]
    layout = (n, heads, dim_v, dim_k) if state_v_first else (n, heads, dim_k, dim_v)
    return q.new_empty(v.shape), q.new_empty(layout, dtype=state_dtypes(q.dtype)[0])

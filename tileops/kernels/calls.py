"""What every delta-rule kernel takes of a call: 16-bit tokens, a square 64- or 128-wide state, and value
heads a multiple of the key heads."""

from __future__ import annotations

from typing import Optional

import torch

from tileops.callspec import CallSpec

HALF_DTYPES = (torch.float16, torch.bfloat16)
WIDTHS = (64, 128)


def shape_problem(kernel: str, spec: CallSpec) -> Optional[str]:
    """Why ``kernel`` cannot take the tokens and state of ``spec``, or None."""
    if spec.dtype not in HALF_DTYPES:
        return f"{kernel} takes float16 or bfloat16 tokens, not {spec.dtype_name}"
    if spec.dim_k != spec.dim_v or spec.dim_k not in WIDTHS:
        return f"{kernel} needs a square 64- or 128-wide state, not K={spec.dim_k}, V={spec.dim_v}"
    if spec.value_heads % spec.heads:
        return f"{kernel} needs HV a multiple of H, not H={spec.heads}, HV={spec.value_heads}"
    return None

"""The precision the reference computes in: float64 for float64 inputs, float32 for the rest."""

from __future__ import annotations

import torch


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; bfloat16, float16 and float32 compute (and keep states) in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32

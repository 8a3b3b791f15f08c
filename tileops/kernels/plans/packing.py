"""The inputs as the programs take them: dense, at 16-byte aligned addresses."""

from __future__ import annotations

import torch


def packed(x: torch.Tensor, *shape: int) -> torch.Tensor:
    """``x`` as a dense ``shape`` tensor at a 16-byte aligned address, what the programs take (TMA
    and vector loads; TileLang refuses strided tensors): ``x`` itself when it already is one, so
    a call on dense inputs copies nothing; a copy for a view such as a slice of a fused q/k/v
    projection."""
    x = x.reshape(shape).contiguous()
    return x if x.data_ptr() % 16 == 0 else x.clone()

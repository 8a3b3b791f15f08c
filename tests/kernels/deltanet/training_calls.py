"""The calls the chunked training kernels' CPU tests describe: a CallSpec of either op, and the
calls both kernels refuse, with the words their refusals must hold."""

from __future__ import annotations

import torch

from tileops.callspec import CallSpec, make_flags


def training_spec(entry: str, mode: str, batch=4, tokens=4096, heads=16, dim=128, dtype=torch.bfloat16,
                  chunk_size=64, device="cuda", arch="sm90") -> CallSpec:
    """A call of ``entry`` (DeltaNetChunkFwdOp or DeltaNetChunkBwdOp, call mode ``mode``) as dispatch
    describes it: B×S×H, K = V = ``dim``."""
    return CallSpec(op="deltanet", entry=entry, mode=mode, dtype=dtype, device=torch.device(device), arch=arch,
                    device_name="NVIDIA H200", batch=batch, tokens=tokens, heads=heads, value_heads=heads,
                    dim_k=dim, dim_v=dim, flags=make_flags(chunk_size=chunk_size))


REFUSED = [  # changes to the default call, and a word its refusal must hold
    (dict(device="cpu", arch="cpu"), "CUDA"),
    (dict(arch="sm80"), "sm90"),
    (dict(dtype=torch.float32), "float16 or bfloat16"),
    (dict(dim=96), "64- or 128-wide"),
    (dict(chunk_size=32), "chunk_size=64"),
    (dict(tokens=300), "whole number of 64-token chunks"),
]

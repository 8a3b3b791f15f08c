"""What every delta-rule kernel takes of a call: 16-bit tokens, a square 64- or 128-wide state, and value
heads a multiple of the key heads; and what the chunked training kernels take besides."""

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


def training_problem(kernel: str, spec: CallSpec, mode: str, entry: str, chunk: int) -> Optional[str]:
    """Why ``kernel``, built for sm90 and the chunked training op ``entry`` (call mode ``mode``), cannot
    serve ``spec``, or None: it takes ``chunk``-token chunks, and sequences of whole chunks (the
    op's per-chunk outputs, DeltaNet's inverses or GLA's states, are each chunk's own)."""
    if spec.device.type != "cuda":
        return f"{kernel} runs on CUDA devices; this call is on {spec.device.type}"
    if spec.arch != "sm90":
        return f"{kernel} is built for sm90 (Hopper: wgmma); the device is {spec.arch}"
    if spec.mode != mode:
        return f"{kernel} serves {entry}, not {spec.mode}"
    problem = shape_problem(kernel, spec)
    if problem:
        return problem
    if spec.flag("chunk_size") != chunk:
        return f"{kernel} takes chunk_size={chunk}, not {spec.flag('chunk_size')}"
    if spec.tokens % chunk:
        return (f"{kernel} takes sequences of a whole number of {chunk}-token chunks ({spec.tokens} tokens is not); "
                f"a cut last chunk goes to the reference")
    return None

"""tl.gdn_prefill: Gated DeltaNet chunked prefill for Hopper, in two passes.

1. ``chunk_prep``: per (value head, 64-token window), fully parallel: input transforms, γ, the
   WY solve T' = (I + A)⁻¹ diag(β), the chunk's masked attention M and the per-row decays.
2. ``chunk_chain``: per (V tile, value head, sequence), sequential over the sequence's chunks:
   Δ = T'(V − e^γ K S), the outputs and the state update, S in registers.

Registers the kernel: its config space (chunk length; the chain's V tile, threads, pipeline depth
and CTAs per SM), the reasons it turns a call down, its default and ``build``.
"""

from __future__ import annotations

from typing import Literal, Optional

import torch
from pydantic import ValidationInfo, model_validator

from tileops.callspec import CallSpec
from tileops.kernels.base import KernelDef
from tileops.kernels.config import KernelConfig
from tileops.kernels.registry import register

HALF_DTYPES = (torch.float16, torch.bfloat16)
WIDTHS = (64, 128)
SMEM_BYTES = 227 * 1024  # opt-in shared memory per block on sm90
SMEM_SLACK = 8 * 1024  # alignment of TileLang's buffers, not in the estimate below
MAX_STATE_CELLS = 64  # fp32 state cells per thread of the chain before registers spill
SMS = 132  # H200 / H100 SXM multiprocessors


class GDNPrefillConfig(KernelConfig):
    """The chain's tiling: ``block_v`` state columns per CTA, its threads, stages and CTAs per SM."""

    chunk_size: Literal[64] = 64
    block_v: Literal[32, 64, 128] = 64
    threads: Literal[128, 256] = 256
    num_stages: Literal[1, 2] = 2
    min_blocks: Literal[1, 2] = 1

    @model_validator(mode="after")
    def _fits(self, info: ValidationInfo) -> "GDNPrefillConfig":
        spec = (info.context or {}).get("spec")
        if spec is not None:
            problem = tile_problem(self, spec.dim_k, spec.dim_v, spec.dtype.itemsize)
            if problem:
                raise ValueError(problem)
        return self


def chain_smem_bytes(config: GDNPrefillConfig, dim_k: int, elem: int) -> int:
    """Shared memory of the chain: pipelined inputs per stage plus the per-chunk work tiles."""
    C, K, BV = config.chunk_size, dim_k, config.block_v
    per_stage = (2 * C * K + C * BV + 2 * C * C) * elem + 4 * C * 4
    work = (K * BV + 4 * C * BV) * elem
    return config.num_stages * per_stage + work + SMEM_SLACK


def tile_problem(config: GDNPrefillConfig, dim_k: int, dim_v: int, elem: int) -> Optional[str]:
    """Why ``config`` cannot tile a K x V state, or None."""
    if dim_v % config.block_v:
        return f"block_v={config.block_v} does not divide V={dim_v}"
    cells = dim_k * config.block_v // config.threads
    limit = MAX_STATE_CELLS // config.min_blocks
    if cells > limit:
        return (f"{config.threads} threads would hold {cells} state cells each (at most {limit} with "
                f"min_blocks={config.min_blocks}); use more threads or a smaller block_v")
    smem = chain_smem_bytes(config, dim_k, elem)
    budget = SMEM_BYTES // config.min_blocks
    if smem > budget:
        return (f"the chain needs {smem} bytes of shared memory (at most {budget} with "
                f"min_blocks={config.min_blocks}); use fewer stages or a smaller block_v")
    return None


def refuse(spec: CallSpec) -> Optional[str]:
    """Why the prefill kernel cannot serve ``spec``, or None."""
    if spec.device.type != "cuda":
        return f"tl.gdn_prefill runs on CUDA devices; this call is on {spec.device.type}"
    if spec.arch != "sm90":
        return f"tl.gdn_prefill is built for sm90 (Hopper: wgmma); the device is {spec.arch}"
    if spec.mode == "decode":
        return "tl.gdn_prefill serves prefill; single-token calls go to the decode kernel"
    if spec.mode not in ("prefill", "varlen"):
        return f"tl.gdn_prefill serves prefill and packed varlen calls, not {spec.mode}"
    if spec.dtype not in HALF_DTYPES:
        return f"tl.gdn_prefill takes float16 or bfloat16 tokens, not {spec.dtype_name}"
    if spec.dim_k != spec.dim_v or spec.dim_k not in WIDTHS:
        return f"tl.gdn_prefill needs a square 64- or 128-wide state, not K={spec.dim_k}, V={spec.dim_v}"
    if spec.value_heads % spec.heads:
        return f"tl.gdn_prefill needs HV a multiple of H, not H={spec.heads}, HV={spec.value_heads}"
    if spec.tokens < 1 or spec.batch < 1:
        return "tl.gdn_prefill needs at least one token and one sequence"
    return None


def default(spec: CallSpec) -> GDNPrefillConfig:
    """A 64-wide V tile, or 32 when fewer than 64 (sequence, value head) walks would leave SMs idle;
    two lean CTAs per SM (128 threads, no prefetch) once the tiles fill two waves, else one CTA of
    256 threads with the next chunk prefetched.

    Measured on the H200 (bf16, K = V = 128): 128-wide tiles lost to 64 on every benchmark shape
    and 16-wide ones lost to 32; the chain's time is set by the chunk walk's latency, which
    more CTAs per SM hide.
    """
    walks = spec.batch * spec.value_heads
    block_v = min(spec.dim_v, 64 if walks >= 64 else 32)
    if walks * (spec.dim_v // block_v) >= 2 * SMS:
        config = GDNPrefillConfig(block_v=block_v, threads=128, num_stages=1)
    else:
        config = GDNPrefillConfig(block_v=block_v, threads=256, num_stages=2)
    if tile_problem(config, spec.dim_k, spec.dim_v, spec.dtype.itemsize) is None:
        return config
    return GDNPrefillConfig(block_v=32, threads=256, num_stages=1)


def build(config: GDNPrefillConfig, spec: CallSpec):
    """Compile both passes for ``spec`` and return ``launch(q, k, v, g, beta, initial_state, ...)``."""
    from tileops.kernels.gdn.prefill_launch import PrefillLauncher

    problem = refuse(spec) or tile_problem(config, spec.dim_k, spec.dim_v, spec.dtype.itemsize)
    if problem:
        raise ValueError(problem)
    return PrefillLauncher(config, spec)


KERNEL = register(KernelDef(
    name="tl.gdn_prefill",
    family="gdn",
    archs=frozenset({"sm90"}),
    config_model=GDNPrefillConfig,
    build=build,
    refuse=refuse,
    default=default,
    modules=("tileops.kernels.gdn.prefill", "tileops.kernels.gdn.prefill_launch",
             "tileops.kernels.gdn.chunk_prep", "tileops.kernels.gdn.chunk_chain"),
))

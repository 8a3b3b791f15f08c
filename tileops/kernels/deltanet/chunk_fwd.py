"""tl.deltanet_chunk_fwd: DeltaNetChunkFwdOp (BHSD, zero initial state, no query scale) on the
shared layer (``launch.chunk_fwd``): every chunk's WY solve with its inverse kept, the key-major
chain storing the state at every chunk boundary, then w and u.

Its config space is the chain's: ``block_v`` state columns per CTA, ``threads`` and ``num_stages``.
It serves sequences whose length is a multiple of the chunk: the op's Aw and Au hold each chunk's
inverse in the chunk's own columns, and the programs' windows are those chunks only then.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import ValidationInfo, model_validator

from tileops.callspec import CallSpec
from tileops.kernels.base import KernelDef
from tileops.kernels.calls import shape_problem
from tileops.kernels.config import KernelConfig
from tileops.kernels.hardware import MAX_STATE_CELLS, SMEM_BYTES, sm_count
from tileops.kernels.plans.tiles import chain_smem_bytes
from tileops.kernels.registry import register

NAME = "tl.deltanet_chunk_fwd"
CHUNK = 64


class ChunkFwdConfig(KernelConfig):
    """The key-major chain's tiling: ``block_v`` state columns per CTA, its threads and pipeline
    stages."""

    block_v: Literal[32, 64, 128] = 64
    threads: Literal[128, 256] = 256
    num_stages: Literal[1, 2] = 2

    @model_validator(mode="after")
    def _fits(self, info: ValidationInfo) -> "ChunkFwdConfig":
        spec = (info.context or {}).get("spec")
        if spec is not None:
            problem = tile_problem(self, spec.dim_k, spec.dim_v, spec.dtype.itemsize)
            if problem:
                raise ValueError(problem)
        return self


def tile_problem(config: ChunkFwdConfig, dim_k: int, dim_v: int, elem: int) -> Optional[str]:
    """Why ``config`` cannot tile a K x V state, or None."""
    if dim_v % config.block_v:
        return f"block_v={config.block_v} does not divide V={dim_v}"
    cells = dim_k * config.block_v // config.threads
    if cells > MAX_STATE_CELLS:
        return (f"{config.threads} threads would hold {cells} state cells each (at most {MAX_STATE_CELLS}); "
                f"use more threads or a smaller block_v")
    smem = chain_smem_bytes(CHUNK, dim_k, config.block_v, config.num_stages, True, elem)
    if smem > SMEM_BYTES:
        return f"the chain needs {smem} bytes of shared memory (at most {SMEM_BYTES}); use fewer stages"
    return None


def refuse(spec: CallSpec) -> Optional[str]:
    """Why the kernel cannot serve ``spec``, or None."""
    if spec.device.type != "cuda":
        return f"{NAME} runs on CUDA devices; this call is on {spec.device.type}"
    if spec.arch != "sm90":
        return f"{NAME} is built for sm90 (Hopper: wgmma); the device is {spec.arch}"
    if spec.mode != "chunk_fwd":
        return f"{NAME} serves DeltaNetChunkFwdOp, not {spec.mode}"
    problem = shape_problem(NAME, spec)
    if problem:
        return problem
    if spec.flag("chunk_size") != CHUNK:
        return f"{NAME} takes chunk_size={CHUNK}, not {spec.flag('chunk_size')}"
    if spec.tokens % CHUNK:
        return (f"{NAME} takes sequences of a whole number of {CHUNK}-token chunks (S={spec.tokens} is not); "
                f"Aw and Au of a cut last chunk come from the reference")
    return None


def default(spec: CallSpec) -> ChunkFwdConfig:
    """64-column V tiles once there are 32 (batch, head) walks, else 32; two lean CTAs per SM (128
    threads, no prefetch) once the tiles fill two waves, else one of 256 threads with prefetch
    (the measurements: docs/benchmarks.md, DeltaNet's chunked training forward)."""
    walks, sms = spec.batch * spec.heads, sm_count(spec.device, spec.arch)
    block_v = min(spec.dim_v, 64 if walks >= 32 else 32)
    if walks * (spec.dim_v // block_v) >= 2 * sms:
        return ChunkFwdConfig(block_v=block_v, threads=128, num_stages=1)
    return ChunkFwdConfig(block_v=block_v, threads=256, num_stages=2)


def plan(config: ChunkFwdConfig, spec: CallSpec) -> str:
    """How ``config`` runs ``spec``, in words."""
    walks = spec.batch * spec.heads
    return (f"every chunk's WY solve at once (inverse kept), then the key-major chain over {config.block_v}-column "
            f"V tiles ({walks * (spec.dim_v // config.block_v)} CTAs for {walks} (batch, head) walks), storing "
            f"the state at each chunk boundary, then w and u")


def build(config: ChunkFwdConfig, spec: CallSpec):
    """Compile the programs for ``spec`` and return ``launch(q, k, v, beta)``."""
    from tileops.kernels.launch.chunk_fwd import ChunkFwdLauncher  # here: it imports TileLang

    problem = refuse(spec) or tile_problem(config, spec.dim_k, spec.dim_v, spec.dtype.itemsize)
    if problem:
        raise ValueError(problem)
    return ChunkFwdLauncher(config, spec)


KERNEL = register(KernelDef(name=NAME, family="deltanet", archs=frozenset({"sm90"}), config_model=ChunkFwdConfig,
                            build=build, refuse=refuse, default=default, modules=("tileops.kernels.deltanet.chunk_fwd",),
                            plan=plan))

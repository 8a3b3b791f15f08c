"""tl.deltanet_chunk_fwd: DeltaNetChunkFwdOp (BHSD, zero initial state, no query scale) on the
shared layer (``launch.chunk_fwd``): every chunk's WY solve with its inverse kept, the key-major
chain storing the state at every chunk boundary, then w and u.

Its config space is the chain's: ``block_v`` state columns per CTA, ``threads`` and ``num_stages``.
It serves sequences whose length is a multiple of the chunk: the op's Aw and Au hold each chunk's
inverse in the chunk's own columns, and the programs' windows are those chunks only then.
"""

from __future__ import annotations

from typing import Literal, Optional

from tileops.callspec import CallSpec
from tileops.kernels import prefill_kernel
from tileops.kernels.base import KernelDef
from tileops.kernels.calls import training_problem
from tileops.kernels.config import TiledConfig
from tileops.kernels.hardware import sm_count
from tileops.kernels.launch.chunk_fwd import ChunkFwdLauncher
from tileops.kernels.registry import register

NAME = "tl.deltanet_chunk_fwd"
CHUNK = 64


class ChunkFwdConfig(TiledConfig):
    """The key-major chain's tiling: ``block_v`` state columns per CTA, its threads and pipeline
    stages."""

    block_v: Literal[32, 64, 128] = 64
    threads: Literal[128, 256] = 256
    num_stages: Literal[1, 2] = 2

    def problem(self, spec: CallSpec) -> Optional[str]:
        return tile_problem(self, spec.dim_k, spec.dim_v, spec.dtype.itemsize)


def tile_problem(config: ChunkFwdConfig, dim_k: int, dim_v: int, elem: int) -> Optional[str]:
    """Why ``config`` cannot tile a K x V state, or None: the prefill's key-major chain's limits,
    the same chain (with boundary states) running it."""
    chain = prefill_kernel.PrefillConfig(chunk_size=CHUNK, state_major="key", block_v=config.block_v,
                                         threads=config.threads, num_stages=config.num_stages)
    return prefill_kernel.tile_problem(chain, dim_k, dim_v, elem)


def refuse(spec: CallSpec) -> Optional[str]:
    """Why the kernel cannot serve ``spec``, or None."""
    return training_problem(NAME, spec, "chunk_fwd", "DeltaNetChunkFwdOp", CHUNK)


def default(spec: CallSpec) -> ChunkFwdConfig:
    """64-column V tiles once there are 32 (batch, head) walks, else 32; tiles of 32 also where 64
    would leave half the SMs idle (a 64-wide state of few walks); then two lean CTAs per SM (128
    threads, no prefetch) once the tiles fill two waves, one of 256 threads with prefetch where
    64-column tiles fill at most one, and 128 threads with prefetch for the halved tiles (the
    measurements: docs/benchmarks.md, DeltaNet's chunked training forward and its tunes)."""
    walks, sms = spec.batch * spec.heads, sm_count(spec.device, spec.arch)
    block_v = min(spec.dim_v, 64 if walks >= 32 else 32)
    if walks * (spec.dim_v // block_v) >= 2 * sms:
        return ChunkFwdConfig(block_v=block_v, threads=128, num_stages=1)
    if block_v == 64 and 2 * walks * (spec.dim_v // block_v) <= sms:
        return ChunkFwdConfig(block_v=32, threads=128, num_stages=2)
    return ChunkFwdConfig(block_v=block_v, threads=256, num_stages=2)


def plan(config: ChunkFwdConfig, spec: CallSpec) -> str:
    """How ``config`` runs ``spec``, in words."""
    walks = spec.batch * spec.heads
    return (f"every chunk's WY solve at once (inverse kept), then the key-major chain over {config.block_v}-column "
            f"V tiles ({walks * (spec.dim_v // config.block_v)} CTAs for {walks} (batch, head) walks), storing "
            f"the state at each chunk boundary, then w and u")


def build(config: ChunkFwdConfig, spec: CallSpec):
    """Compile the programs for ``spec`` and return ``launch(q, k, v, beta)``."""
    problem = refuse(spec) or tile_problem(config, spec.dim_k, spec.dim_v, spec.dtype.itemsize)
    if problem:
        raise ValueError(problem)
    return ChunkFwdLauncher(config, spec)


KERNEL = register(KernelDef(name=NAME, family="deltanet", archs=frozenset({"sm90"}), config_model=ChunkFwdConfig,
                            build=build, refuse=refuse, default=default, modules=("tileops.kernels.deltanet.chunk_fwd",),
                            plan=plan))

"""tl.deltanet_chunk_bwd: DeltaNetChunkBwdOp (BHSD) on the shared layer (``launch.chunk_bwd``): the
backward state walk, last chunk first, then every chunk's dq, dk, dv and dβ at once, the WY
backward included, from the forward's boundary states, inverse and w, u.

Its config space is the walk's: ``block_v`` state-gradient columns per CTA and ``num_stages``.
The gradients' pass holds each chunk's whole K × V state (one config). It takes what
``tl.deltanet_chunk_fwd`` serves: sequences of whole 64-token chunks.
"""

from __future__ import annotations

from typing import Literal, Optional

from tileops.callspec import CallSpec
from tileops.kernels.base import KernelDef
from tileops.kernels.calls import training_problem
from tileops.kernels.config import KernelConfig
from tileops.kernels.launch.chunk_bwd import ChunkBwdLauncher
from tileops.kernels.registry import register

NAME = "tl.deltanet_chunk_bwd"
CHUNK = 64


class ChunkBwdConfig(KernelConfig):
    """The backward walk's tiling: ``block_v`` columns of the state gradient per CTA of 128 threads
    (64 cells each at the widest), and its pipeline stages. 128-column tiles on 256 threads, and
    256 threads for 64 columns, never beat these (docs/benchmarks.md, DeltaNet's training step)."""

    block_v: Literal[32, 64] = 64
    threads: Literal[128] = 128
    num_stages: Literal[1, 2] = 2


def refuse(spec: CallSpec) -> Optional[str]:
    """Why the kernel cannot serve ``spec``, or None."""
    return training_problem(NAME, spec, "chunk_bwd", "DeltaNetChunkBwdOp", CHUNK)


def default(spec: CallSpec) -> ChunkBwdConfig:
    """64-column tiles once there are 32 (batch, head) walks, else 32 (more CTAs for the walk)."""
    walks = spec.batch * spec.heads
    return ChunkBwdConfig(block_v=min(spec.dim_v, 64 if walks >= 32 else 32), threads=128, num_stages=2)


def plan(config: ChunkBwdConfig, spec: CallSpec) -> str:
    """How ``config`` runs ``spec``, in words."""
    walks = spec.batch * spec.heads
    chunks = spec.batch * spec.heads * (spec.tokens // CHUNK)
    return (f"the backward state walk, last chunk first, over {config.block_v}-column tiles "
            f"({walks * (spec.dim_v // config.block_v)} CTAs for {walks} (batch, head) walks), then every chunk's "
            f"gradients with the WY backward at once ({chunks} CTAs)")


def build(config: ChunkBwdConfig, spec: CallSpec):
    """Compile the programs for ``spec`` and return ``launch(do, q, k, v, beta, S, Aw, Au, w, u)``."""
    problem = refuse(spec)
    if problem:
        raise ValueError(problem)
    return ChunkBwdLauncher(config, spec)


KERNEL = register(KernelDef(name=NAME, family="deltanet", archs=frozenset({"sm90"}), config_model=ChunkBwdConfig,
                            build=build, refuse=refuse, default=default, modules=("tileops.kernels.deltanet.chunk_bwd",),
                            plan=plan))

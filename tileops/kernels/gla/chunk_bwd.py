"""tl.gla_chunk_bwd: GLAChunkBwdOp (BTHD) on the shared layer (``launch.chunk_bwd_channel``): the
forward's first pass again, the backward state walk, last chunk first, then every chunk's dq, dk,
dv and dg at once, from the forward's per-chunk states h.

Its config space is the walk's ``block_v``, the state-gradient columns per CTA (the walk is a
twentieth of the backward: its tiles and pipeline depths timed alike, docs/benchmarks.md). The
gradients' pass holds a chunk's whole K × V state (one config). It takes what ``tl.gla_chunk_fwd``
serves: sequences of whole 64-token chunks.
"""

from __future__ import annotations

from typing import Literal, Optional

from tileops.callspec import CallSpec
from tileops.kernels.base import KernelDef
from tileops.kernels.calls import training_problem
from tileops.kernels.config import KernelConfig
from tileops.kernels.launch.chunk_bwd_channel import ChannelChunkBwdLauncher
from tileops.kernels.registry import register

NAME = "tl.gla_chunk_bwd"
CHUNK = 64


class ChannelChunkBwdConfig(KernelConfig):
    """The backward walk's tiling: ``block_v`` columns of the state gradient per CTA of 128
    threads."""

    chunk_size: Literal[64] = 64
    block_v: Literal[32, 64] = 64


def refuse(spec: CallSpec) -> Optional[str]:
    """Why the kernel cannot serve ``spec``, or None."""
    return training_problem(NAME, spec, "chunk_bwd", "GLAChunkBwdOp", CHUNK)


def default(spec: CallSpec) -> ChannelChunkBwdConfig:
    """64-column tiles once there are 32 (batch, head) walks, else 32 (more CTAs for the walk)."""
    walks = spec.batch * spec.heads
    return ChannelChunkBwdConfig(block_v=min(spec.dim_v, 64 if walks >= 32 else 32))


def plan(config: ChannelChunkBwdConfig, spec: CallSpec) -> str:
    """How ``config`` runs ``spec``, in words."""
    walks = spec.batch * spec.heads
    chunks = walks * (spec.tokens // CHUNK)
    return (f"the forward's first pass again ({chunks} CTAs), the backward state walk, last chunk first, over "
            f"{config.block_v}-column tiles ({walks * (spec.dim_v // config.block_v)} CTAs for {walks} (batch, head) "
            f"walks), then every chunk's gradients at once ({chunks} CTAs)")


def build(config: ChannelChunkBwdConfig, spec: CallSpec):
    """Compile the programs for ``spec`` and return ``launch(q, k, v, g, h, do, dht)``."""
    problem = refuse(spec)
    if problem:
        raise ValueError(problem)
    return ChannelChunkBwdLauncher(config, spec)


KERNEL = register(KernelDef(name=NAME, family="gla", archs=frozenset({"sm90"}), config_model=ChannelChunkBwdConfig,
                            build=build, refuse=refuse, default=default, modules=("tileops.kernels.gla.chunk_bwd",),
                            plan=plan))

"""tl.gla_chunk_fwd: GLAChunkFwdOp (BTHD, optional key-major initial state, ``scale``) as GLA's
per-channel prefill (``channel_prefill_kernel``) whose chain also stores the state entering each
chunk and the final one: (o, final_state, h), h [B, T / 64 + 1, H, K, V] in fp32, the per-chunk
states that GLAChunkBwdOp reads.

It serves sequences of whole 64-token chunks: the programs' windows are the sequences' own chunks
only then. The config space is the prefill's.
"""

from __future__ import annotations

from typing import Optional

from tileops.callspec import CallSpec
from tileops.kernels.base import KernelDef
from tileops.kernels.calls import training_problem
from tileops.kernels.channel_prefill_kernel import ChannelPrefillConfig, default, plan
from tileops.kernels.launch.chunked_channel import ChannelPrefillLauncher
from tileops.kernels.registry import register

NAME = "tl.gla_chunk_fwd"
CHUNK = 64


def refuse(spec: CallSpec) -> Optional[str]:
    """Why the kernel cannot serve ``spec``, or None."""
    return training_problem(NAME, spec, "chunk_fwd", "GLAChunkFwdOp", CHUNK)


def build(config: ChannelPrefillConfig, spec: CallSpec):
    """Compile the programs for ``spec`` and return ``launch(q, k, v, g, initial_state)`` -> (o,
    final_state, h)."""
    problem = refuse(spec) or config.problem(spec)
    if problem:
        raise ValueError(problem)
    launcher = ChannelPrefillLauncher(config, spec, delta=False, boundaries=True)

    def launch(q, k, v, g, initial_state=None):
        return launcher(q, k, v, g, None, initial_state)
    return launch


KERNEL = register(KernelDef(
    name=NAME, family="gla", archs=frozenset({"sm90"}), config_model=ChannelPrefillConfig, build=build,
    refuse=refuse, default=default, modules=("tileops.kernels.gla.chunk_fwd",),
    plan=lambda config, spec: plan(config, spec, delta=False) + ", storing the state at each chunk boundary"))

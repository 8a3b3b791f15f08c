"""The chunked prefill under one decay per key channel, for Hopper, in two passes on the shared
layer: ``chunk_prep_channel`` forms every chunk's per-channel gated products (and, with the delta
rule, its WY solve) and the decayed keys and queries at once, then the value-major chain
(``chain_value`` under ``chunk_h``'s per-channel walk) carries the state through each sequence.

KDA (the delta rule) and GLA (its plain gated sum) register it with ``register_channel_prefill``;
the config space is the chain's pipeline depth (``num_stages``) on 64-row V tiles, one warpgroup
each. The first pass runs two warpgroups a window (``programs.chunk_prep_channel.HALVES``).
"""

from __future__ import annotations

from typing import ClassVar, Literal, Optional

from tileops.callspec import CallSpec
from tileops.kernels.base import KernelDef
from tileops.kernels.config import TiledConfig
from tileops.kernels.hardware import SMEM_BYTES, WARPGROUP, sm_count
from tileops.kernels.launch.chunked_channel import ChannelPrefillLauncher
from tileops.kernels.plans.channel_pieces import call_width
from tileops.kernels.plans.tiles import chain_smem_bytes
from tileops.kernels.prefill_kernel import prefill_problem
from tileops.kernels.registry import register


class ChannelPrefillConfig(TiledConfig):
    """The value-major chain's pipeline stages on ``block_v``-row V tiles (``threads`` = 2 · ``block_v``)."""

    chunk_size: Literal[64] = 64
    num_stages: Literal[1, 2] = 2
    block_v: ClassVar[int] = 64

    @property
    def threads(self) -> int:
        return 2 * self.block_v

    def problem(self, spec: CallSpec) -> Optional[str]:
        if spec.dim_v % self.block_v:
            return f"block_v={self.block_v} does not divide V={spec.dim_v}"
        smem = chain_smem_bytes(self.chunk_size, spec.dim_k, self.block_v, self.num_stages, False,
                                spec.dtype.itemsize, channel=True)
        if smem > SMEM_BYTES:
            return f"the chain needs {smem} bytes of shared memory (at most {SMEM_BYTES}); use fewer stages"
        return None


def default(spec: CallSpec, delta: Optional[bool] = None) -> ChannelPrefillConfig:
    """64-row tiles prefetching the next chunk (two stages), or one stage where a prefill (``delta``
    given: whether it has the delta rule) cuts its sequences into pieces: on an H100 two stages
    were as fast or faster on every uncut row timed (KDA B4×T8192 H32 by 4 %), one faster on the
    cut ones (GLA B1×T32768 H16 by 6 %; docs/benchmarks.md, 2026-12-06 14:35)."""
    cut = delta is not None and call_width(spec, ChannelPrefillConfig().chunk_size, ChannelPrefillConfig.block_v, delta)
    return ChannelPrefillConfig(num_stages=1 if cut else 2)


def plan(config: ChannelPrefillConfig, spec: CallSpec, delta: bool = True) -> str:
    """How ``config`` runs ``spec``, in words."""
    walks = spec.batch * spec.value_heads
    tiles = walks * (spec.dim_v // config.block_v)
    first = "per-channel gated products and WY solve" if delta else "per-channel gated products"
    width = call_width(spec, config.chunk_size, config.block_v, delta)
    step = "its walk from the identity" if delta else "its decay"
    cut = (f"; sequences cut into pieces of {width} windows walked side by side, from zero and then from their "
           f"exact entries (the state's transition over a piece is {step})") if width else ""
    return (f"two passes: every chunk's {first} at once, then the value-major chain over {config.block_v}-row V "
            f"tiles ({tiles} CTAs; {walks} (sequence, value head) walks for {sm_count(spec.device, spec.arch)} SMs, "
            f"{config.threads // WARPGROUP} warpgroups each){cut}")


def register_channel_prefill(name: str, family: str, module: str, delta: bool, order=None) -> KernelDef:
    """Register prefill kernel ``name`` of ``family`` (``delta``: whether it has the delta rule).
    ``order(launcher)``, where given, maps the family's op arguments onto the launcher's (q, k, v,
    g, beta, initial_state, cu_seqlens, cu_seqlens_cpu, A_log, dt_bias)."""
    def refuse(spec: CallSpec) -> Optional[str]:
        return prefill_problem(name, spec)

    def build(config: ChannelPrefillConfig, spec: CallSpec):
        problem = refuse(spec) or config.problem(spec)
        if problem:
            raise ValueError(problem)
        launcher = ChannelPrefillLauncher(config, spec, delta)
        return launcher if order is None else order(launcher)

    return register(KernelDef(name=name, family=family, archs=frozenset({"sm90"}), config_model=ChannelPrefillConfig,
                              build=build, refuse=refuse, default=lambda spec: default(spec, delta), modules=(module,),
                              plan=lambda config, spec: plan(config, spec, delta)))

"""One family's decode kernel from the shared pieces: the plan's config space, default and call
checks, the launcher of ``launch.decode``, and the family's own rule and argument order.

A family names its step (``DecodeRule``: gate and delta rule), the modes and token dtypes it
serves and an ``adapt(launcher, spec)`` that maps its ops' forward arguments onto
``DecodeLauncher.step``; this module registers the rest.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from tileops.callspec import CallSpec
from tileops.kernels.base import KernelDef, Launcher
from tileops.kernels.plans.decode_tile import DecodeConfig, DecodeRule, decode_problem, default_config, tile_problem
from tileops.kernels.registry import register

Adapter = Callable[[object, CallSpec], Launcher]


def register_decode(name: str, family: str, rule: DecodeRule, modes: tuple[str, ...],
                    dtypes: tuple[torch.dtype, ...], adapt: Optional[Adapter], module: str) -> KernelDef:
    """Register decode kernel ``name``; ``adapt`` None serves the gated delta rule's argument
    order (q, k, v, g, beta, initial_state, cu_seqlens, cu_seqlens_cpu, A_log, dt_bias) as is."""
    def refuse(spec: CallSpec) -> Optional[str]:
        return decode_problem(name, spec, modes, dtypes)

    def build(config: DecodeConfig, spec: CallSpec) -> Launcher:
        from tileops.kernels.launch.decode import DecodeLauncher  # here: it imports TileLang

        problem = refuse(spec) or tile_problem(config, spec.dim_k, spec.dim_v, bool(spec.flag("state_v_first", False)))
        if problem:
            raise ValueError(problem)
        launcher = DecodeLauncher(config, spec, rule, name)
        return launcher if adapt is None else adapt(launcher, spec)

    return register(KernelDef(name=name, family=family, archs=frozenset({"sm90"}), config_model=DecodeConfig,
                              build=build, refuse=refuse, default=default_config, modules=(module,)))

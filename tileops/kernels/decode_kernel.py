"""One family's decode kernel from the shared pieces: the plan's config space, default and call
checks, the launcher of ``launch.decode``, and the family's own rule and argument order.

A family names its step (``DecodeRule``: gate and delta rule) and the modes and token dtypes it
serves; this module registers the rest. The rule also says which arguments its ops take: g with
a gate, beta with the delta rule, so one mapping serves every family's forward order.
"""

from __future__ import annotations

from typing import Optional

import torch

from tileops.callspec import CallSpec
from tileops.kernels.base import KernelDef, Launcher
from tileops.kernels.launch.decode import DecodeLauncher
from tileops.kernels.plans.decode_tile import (DELTA_SCALAR, DecodeConfig, DecodeRule, decode_problem,
                                               default_config, tile_problem)
from tileops.kernels.registry import register

def forward_order(launcher, spec: CallSpec, rule: DecodeRule) -> Launcher:
    """The family's op arguments onto ``launcher.step``: (q, k, v, [g], [beta], state) for a
    step op's [B, H, D] call, else (q, k, v, [g], [beta], initial_state, cu_seqlens,
    cu_seqlens_cpu, [A_log, dt_bias]) with dt_bias flattened to one value per channel."""
    gate, delta = rule.gate != "none", rule.delta

    def split(rest: tuple) -> tuple:
        g = rest[0] if gate else None
        beta = rest[int(gate)] if delta else None
        return g, beta, rest[int(gate) + int(delta):]

    if spec.mode == "step":
        def step(q, k, v, *rest):
            g, beta, (state,) = split(rest)
            o, new_state = launcher.step(q[:, None], k[:, None], v[:, None], None if g is None else g[:, None],
                                         None if beta is None else beta[:, None], state)
            return o[:, 0], new_state
        return step

    def launch(q, k, v, *rest):
        g, beta, (initial_state, _cu_seqlens, _cu_seqlens_cpu, *gate_params) = split(rest)
        A_log, dt_bias = gate_params or (None, None)
        return launcher.step(q, k, v, g, beta, initial_state, A_log, None if dt_bias is None else dt_bias.reshape(-1))
    return launch


def register_decode(name: str, family: str, rule: DecodeRule, modes: tuple[str, ...],
                    dtypes: tuple[torch.dtype, ...], module: str) -> KernelDef:
    """Register decode kernel ``name``. The gated delta rule's own launcher already takes its
    ops' order (q, k, v, g, beta, initial_state, cu_seqlens, cu_seqlens_cpu, A_log, dt_bias)."""
    def refuse(spec: CallSpec) -> Optional[str]:
        return decode_problem(name, spec, modes, dtypes)

    def build(config: DecodeConfig, spec: CallSpec) -> Launcher:
        problem = refuse(spec) or tile_problem(config, spec.dim_k, spec.dim_v, bool(spec.flag("state_v_first", False)))
        if problem:
            raise ValueError(problem)
        launcher = DecodeLauncher(config, spec, rule, name)
        return launcher if rule == DELTA_SCALAR else forward_order(launcher, spec, rule)

    return register(KernelDef(name=name, family=family, archs=frozenset({"sm90"}), config_model=DecodeConfig,
                              build=build, refuse=refuse, default=default_config, modules=(module,)))

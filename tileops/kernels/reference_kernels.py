"""The ``reference`` target: PyTorch kernels that serve every op on any device (the CPU path).

Each kernel applies the call's input transforms (L2 norm of q and k, beta transform, gate) and
state layout, then runs the reference semantics of ``tileops.reference``. The chunked kernels of
the inference ops have a real config space, so the CPU tuner searches it like any other.
"""

from __future__ import annotations

import functools
from typing import Callable, Literal, Optional

import torch

from tileops.callspec import CallSpec
from tileops.kernels.base import KernelDef, Launcher
from tileops.kernels.config import EmptyConfig, KernelConfig
from tileops.kernels.registry import register
from tileops.reference import (beta_transform, chunk_delta_rule, chunk_gla, delta_rule_step,
                               deltanet_chunk_backward, deltanet_chunk_forward, gdn_gate, gla_chunk_backward,
                               gla_step, kda_gate, l2norm, recurrent_delta_rule)

Builder = Callable[[KernelConfig, CallSpec], Launcher]


class DeltaChunkConfig(KernelConfig):
    """Chunked delta rule on CPU: the chunk length and how each chunk's (I + A)⁻¹ is formed."""

    chunk_size: Literal[16, 32, 64, 128] = 64
    solve: Literal["triangular", "substitution"] = "triangular"


class KDAChunkConfig(DeltaChunkConfig):
    """Per-channel gates add the sub-chunk inside which decays are formed pairwise."""

    subchunk: Literal[4, 8, 16] = 8


class GLAChunkConfig(KernelConfig):
    """Chunked GLA on CPU: no (I + A)⁻¹, so the chunk length and the pairwise sub-chunk."""

    chunk_size: Literal[16, 32, 64, 128] = 64
    subchunk: Literal[4, 8, 16] = 8


# --- inference ops: transforms, state layout, then the recurrence or its chunked form ---------

def _serve(spec: CallSpec, forward: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           beta: Optional[torch.Tensor], g: Optional[torch.Tensor], initial_state: Optional[torch.Tensor],
           cu_seqlens: Optional[torch.Tensor], cu_seqlens_cpu: Optional[torch.Tensor]) -> tuple:
    """(o in q's dtype, final_state in the call's state layout) of one inference call."""
    out_dtype = q.dtype
    if spec.flag("use_qk_l2norm_in_kernel", False):
        q, k = l2norm(q), l2norm(k)
    if beta is not None:
        beta = beta_transform(beta, sigmoid=spec.flag("use_beta_sigmoid_in_kernel", False),
                              neg_eigval=spec.flag("allow_neg_eigval", False))
    value_first = spec.flag("state_v_first", False)
    if value_first and initial_state is not None:
        initial_state = initial_state.mT
    o, state = forward(q, k, v, beta, g, scale=spec.flag("scale"), initial_state=initial_state,
                       cu_seqlens=cu_seqlens_cpu if cu_seqlens_cpu is not None else cu_seqlens)
    return o.to(out_dtype), state.mT.contiguous() if value_first else state


def _forward(config: KernelConfig) -> Callable:
    """The token-by-token recurrence for an empty config, else the chunked form with its knobs."""
    knobs = config.model_dump()
    return functools.partial(chunk_delta_rule, **knobs) if knobs else recurrent_delta_rule


def _deltanet_fwd(config: KernelConfig, spec: CallSpec) -> Launcher:
    forward = _forward(config)

    def launch(q, k, v, beta, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None):
        return _serve(spec, forward, q, k, v, beta, None, initial_state, cu_seqlens, cu_seqlens_cpu)
    return launch


def _gated_fwd(gate: Callable) -> Builder:
    """GDNFwdOp and KDAFwdOp: ``gate(g, A_log, dt_bias, spec)`` turns a raw gate into log decays."""
    def build(config: KernelConfig, spec: CallSpec) -> Launcher:
        forward = _forward(config)

        def launch(q, k, v, g, beta, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None,
                   A_log=None, dt_bias=None):
            if spec.flag("use_gate_in_kernel", False):
                g = gate(g, A_log, dt_bias, spec)
            return _serve(spec, forward, q, k, v, beta, g, initial_state, cu_seqlens, cu_seqlens_cpu)
        return launch
    return build


def _gla_fwd(config: KernelConfig, spec: CallSpec) -> Launcher:
    forward = _forward(config)

    def launch(q, k, v, g, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None):
        return _serve(spec, forward, q, k, v, None, g, initial_state, cu_seqlens, cu_seqlens_cpu)
    return launch


# --- decode steps (BHD): new_state comes back in the given state's dtype -----------------------

def _deltanet_step(config: KernelConfig, spec: CallSpec) -> Launcher:
    def launch(q, k, v, beta, state):
        o, new_state = delta_rule_step(q, k, v, beta, state, scale=1.0)
        return o, new_state.to(state.dtype)
    return launch


def _gla_step(config: KernelConfig, spec: CallSpec) -> Launcher:
    def launch(q, k, v, gk, state):
        o, new_state = gla_step(q, k, v, gk, state, scale=spec.flag("scale"))
        return o, new_state.to(state.dtype)
    return launch


# --- chunk ops: the chunk size is the op's, part of its outputs' shapes ------------------------

def _deltanet_chunk_fwd(config: KernelConfig, spec: CallSpec) -> Launcher:
    def launch(q, k, v, beta):
        return deltanet_chunk_forward(q, k, v, beta, chunk_size=spec.flag("chunk_size"))
    return launch


def _deltanet_chunk_bwd(config: KernelConfig, spec: CallSpec) -> Launcher:
    def launch(do, q, k, v, beta, S, Aw, Au, w, u):
        return deltanet_chunk_backward(do, q, k, v, beta, S, chunk_size=spec.flag("chunk_size"))
    return launch


def _gla_chunk_fwd(config: KernelConfig, spec: CallSpec) -> Launcher:
    def launch(q, k, v, g, initial_state=None):
        return chunk_gla(q, k, v, g, scale=spec.flag("scale"), initial_state=initial_state,
                         chunk_size=spec.flag("chunk_size"))
    return launch


def _gla_chunk_bwd(config: KernelConfig, spec: CallSpec) -> Launcher:
    def launch(q, k, v, g, h, do, dht):
        return gla_chunk_backward(q, k, v, g, h, do, dht, scale=spec.flag("scale"),
                                  chunk_size=spec.flag("chunk_size"),
                                  has_initial_state=spec.flag("has_initial_state", False))
    return launch


# --- registration -----------------------------------------------------------------------------

_BASE = ("tileops.kernels.reference_kernels", "tileops.reference.precision", "tileops.reference.sequences",
         "tileops.reference.transforms")
_NAIVE = ("tileops.reference.delta_rule.naive",)
_CHUNK = ("tileops.reference.delta_rule.chunk", "tileops.reference.delta_rule.intra")
_DECODE_MODES = ("decode", "step")


def _refuse(entries: frozenset[str], decode_only: bool) -> Callable[[CallSpec], Optional[str]]:
    def refuse(spec: CallSpec) -> Optional[str]:
        if spec.entry not in entries:
            return f"serves {', '.join(sorted(entries))}, not {spec.entry}"
        if decode_only and spec.mode not in _DECODE_MODES:
            return (f"runs the recurrence token by token for single-token decode; {spec.mode} calls "
                    "go to the chunked reference")
        return None
    return refuse


def _define(name: str, family: str, builders: dict[str, Builder], modules: tuple[str, ...], *,
            config_model: type[KernelConfig] = EmptyConfig, decode_only: bool = False) -> KernelDef:
    return register(KernelDef(
        name=name, family=family, archs=frozenset({"cpu"}), config_model=config_model,
        build=lambda config, spec: builders[spec.entry](config, spec),
        refuse=_refuse(frozenset(builders), decode_only),
        default=lambda spec: config_model(),
        modules=_BASE + modules,
    ))


def _gdn_gate(g, A_log, dt_bias, spec):
    return gdn_gate(g, A_log, dt_bias)


def _kda_gate(g, A_log, dt_bias, spec):
    return kda_gate(g, A_log, dt_bias, spec.flag("lower_bound"))


_define("reference.deltanet_chunk_fwd", "deltanet", {"DeltaNetChunkFwdOp": _deltanet_chunk_fwd}, _CHUNK)
_define("reference.deltanet_chunk_bwd", "deltanet", {"DeltaNetChunkBwdOp": _deltanet_chunk_bwd},
        _CHUNK + ("tileops.reference.backward",))
_define("reference.deltanet_recurrent", "deltanet",
        {"DeltaNetRecurrentFwdOp": _deltanet_step, "DeltaNetFwdOp": _deltanet_fwd}, _NAIVE, decode_only=True)
_define("reference.deltanet_chunk", "deltanet", {"DeltaNetFwdOp": _deltanet_fwd}, _CHUNK,
        config_model=DeltaChunkConfig)
_define("reference.gdn_recurrent", "gdn", {"GDNFwdOp": _gated_fwd(_gdn_gate)}, _NAIVE, decode_only=True)
_define("reference.gdn_chunk", "gdn", {"GDNFwdOp": _gated_fwd(_gdn_gate)}, _CHUNK, config_model=DeltaChunkConfig)
_define("reference.kda_recurrent", "kda", {"KDAFwdOp": _gated_fwd(_kda_gate)}, _NAIVE, decode_only=True)
_define("reference.kda_chunk", "kda", {"KDAFwdOp": _gated_fwd(_kda_gate)}, _CHUNK, config_model=KDAChunkConfig)
_define("reference.gla_chunk_fwd", "gla", {"GLAChunkFwdOp": _gla_chunk_fwd}, _CHUNK + ("tileops.reference.gla.chunk",))
_define("reference.gla_chunk_bwd", "gla", {"GLAChunkBwdOp": _gla_chunk_bwd},
        _CHUNK + ("tileops.reference.gla.chunk", "tileops.reference.backward"))
_define("reference.gla_recurrent", "gla", {"GLARecurrentFwdOp": _gla_step, "GLAFwdOp": _gla_fwd},
        _NAIVE + ("tileops.reference.gla.naive",), decode_only=True)
_define("reference.gla_chunk", "gla", {"GLAFwdOp": _gla_fwd}, _CHUNK, config_model=GLAChunkConfig)

"""The chunked programs a prefill config runs, specialised on a call and compiled for its arch.

Every program is specialised on the config, dtype, heads, widths and flags; token count, batch and
sequence count are run-time values, so a new length reuses the compiled programs.
"""

from __future__ import annotations

import torch

from tileops.callspec import CallSpec
from tileops.kernels.config import KernelConfig
from tileops.kernels.launch.compiled import DISABLE_WARP_SPECIALIZED, FAST_MATH, Program, compiled
from tileops.kernels.plans.entries import WARM_REACH

# The software pipeline of the chain keeps its loads in the compute warps: the automatic
# producer/consumer split mishandles the state tile set up before the loop.
PASS_CONFIGS = {DISABLE_WARP_SPECIALIZED: True}
# The first pass is bound by the latency of its transcendentals (alone on one warpgroup in the
# fused kernel): approximate ones took the fused B8×T4096 from 0.88 ms to 0.78, and the two-pass
# first pass of B8 from 0.420 to 0.408, at the same error against the float64 reference.
FIRST_PASS_CONFIGS = dict(PASS_CONFIGS, **{FAST_MATH: True})

TL_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


def query_scale(spec: CallSpec) -> float:
    """The call's query scale: its ``scale`` flag, or K^-1/2."""
    scale = spec.flag("scale")
    return float(spec.dim_k ** -0.5 if scale is None else scale)


def sequences(spec: CallSpec, pieces: bool = False) -> str:
    """How the call hands its sequences to a program (``blocks.entry``)."""
    return "pieces" if pieces else "packed" if spec.mode == "varlen" else "equal"


def transform_flags(spec: CallSpec, gated: bool) -> dict:
    """The input transforms the call asks the kernel for (``gated``: whether its family has a
    gate), and the token dtype."""
    return dict(dtype=TL_DTYPES[spec.dtype], gated=gated, l2norm=bool(spec.flag("use_qk_l2norm_in_kernel", False)),
                gate_in_kernel=bool(spec.flag("use_gate_in_kernel", False)),
                beta_sigmoid=bool(spec.flag("use_beta_sigmoid_in_kernel", False)),
                neg_eigval=bool(spec.flag("allow_neg_eigval", False)))


# The state pass of each layout (the config's ``state_major``).
CHAINS = {"key": "tileops.kernels.programs.chain_key:chain_program",
          "value": "tileops.kernels.programs.chain_value:chain_program"}


def compile_prep(config: KernelConfig, spec: CallSpec, gated: bool = True) -> Program:
    """The first pass for ``spec``."""
    args = dict(heads=spec.heads, value_heads=spec.value_heads, dim_k=spec.dim_k, chunk=config.chunk_size,
                sequences=sequences(spec), scale=query_scale(spec), **transform_flags(spec, gated))
    return compiled("tileops.kernels.programs.chunk_prep:prep_program", args, spec.arch, FIRST_PASS_CONFIGS)


def compile_fused(config: KernelConfig, spec: CallSpec, gated: bool = True) -> Program:
    """The fused kernel for ``spec``."""
    args = dict(heads=spec.heads, value_heads=spec.value_heads, dim_k=spec.dim_k, dim_v=spec.dim_v,
                chunk=config.chunk_size, state_v_first=bool(spec.flag("state_v_first", False)),
                walk_moves=config.walk_moves, walk_issue=config.walk_issue, stages=config.num_stages,
                sequences=sequences(spec, bool(config.piece_chunks)), scale=query_scale(spec),
                **transform_flags(spec, gated))
    return compiled("tileops.kernels.programs.chunk_fused:fused_program", args, spec.arch, FIRST_PASS_CONFIGS)


def compile_summary(config: KernelConfig, spec: CallSpec, gated: bool = True, value_tile: int = 0) -> Program:
    """The pieces' summaries for ``spec``'s exact schedule: each piece's state and transition, on
    ``value_tile`` value rows a CTA (0: all)."""
    args = dict(heads=spec.heads, value_heads=spec.value_heads, dim_k=spec.dim_k, dim_v=spec.dim_v,
                chunk=config.chunk_size, state_v_first=bool(spec.flag("state_v_first", False)),
                walk_moves="elementwise", walk_issue=config.walk_issue, stages=config.num_stages,
                sequences="pieces", scale=query_scale(spec), summary=True, value_tile=value_tile,
                **transform_flags(spec, gated))
    return compiled("tileops.kernels.programs.chunk_fused:fused_program", args, spec.arch, FIRST_PASS_CONFIGS)


def compile_piece_entries(spec: CallSpec) -> Program:
    """The chains of the exact schedule's summaries into entry states (exact fp32 arithmetic)."""
    args = dict(value_heads=spec.value_heads, dim=spec.dim_v, state_v_first=bool(spec.flag("state_v_first", False)))
    return compiled("tileops.kernels.programs.piece_entries:piece_entries_program", args, spec.arch, PASS_CONFIGS)


def compile_warm_start(config: KernelConfig, spec: CallSpec, gated: bool = True) -> Program:
    """Where the warm-up walks of ``spec``'s pieces begin (exact arithmetic: it bounds a product); with
    the exact schedule, which pieces reach too far back and take their entry states instead."""
    args = dict(heads=spec.heads, value_heads=spec.value_heads, dim_k=spec.dim_k, chunk=config.chunk_size,
                reach=WARM_REACH, **transform_flags(spec, gated))
    return compiled("tileops.kernels.programs.warm_start:warm_start_program", args, spec.arch, PASS_CONFIGS)


def compile_chain(config: KernelConfig, spec: CallSpec) -> Program:
    """The state pass for ``spec``, in the config's layout (value-major: with its products' waits)."""
    waits = dict(issue=config.walk_issue) if config.state_major == "value" else {}
    args = dict(heads=spec.heads, value_heads=spec.value_heads, dim_k=spec.dim_k, dim_v=spec.dim_v,
                chunk=config.chunk_size, block_v=config.block_v, dtype=TL_DTYPES[spec.dtype],
                sequences=sequences(spec), state_v_first=bool(spec.flag("state_v_first", False)),
                threads=config.threads, num_stages=config.num_stages, **waits)
    return compiled(CHAINS[config.state_major], args, spec.arch, PASS_CONFIGS)

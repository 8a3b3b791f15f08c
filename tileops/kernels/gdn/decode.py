"""tl.gdn_decode: the Gated DeltaNet single-token step as one fused, bandwidth-bound kernel.

Registers the kernel: its config space (V-tile per CTA, threads per CTA, an occupancy hint), the
reasons it turns a call down, and ``build``, which compiles the program of ``programs.decode`` and
returns the launcher of ``launch.decode``: it allocates the outputs and launches once, with no
host sync, so it can be captured in a CUDA graph.
"""

from __future__ import annotations

from typing import Callable, Literal, Optional

from pydantic import ValidationInfo, model_validator

from tileops.callspec import CallSpec
from tileops.kernels.base import KernelDef
from tileops.kernels.config import KernelConfig
from tileops.kernels.gdn.calls import shape_problem
from tileops.kernels.hardware import MAX_STATE_CELLS, sm_count
from tileops.kernels.plans.decode_tile import thread_tile
from tileops.kernels.registry import register
# 64-wide V tiles an SM must take for them to replace 32-wide ones: measured ahead at 124 (B256),
# while up to B16 at HV32 (below 8) keeps the 32-wide tiles measured best there before.
WIDE_TILES_PER_SM = 8


class GDNDecodeConfig(KernelConfig):
    """One CTA updates a K x ``block_v`` tile of one head's state with ``threads`` threads.

    ``min_blocks`` is 1 (no occupancy hint); the field keeps stored configs valid.
    """

    block_v: Literal[32, 64] = 32
    threads: Literal[32, 64, 128] = 128
    min_blocks: Literal[1] = 1

    @model_validator(mode="after")
    def _fits(self, info: ValidationInfo) -> "GDNDecodeConfig":
        spec = (info.context or {}).get("spec")
        if spec is not None:
            problem = tile_problem(self, spec.dim_k, spec.dim_v, bool(spec.flag("state_v_first", False)))
            if problem:
                raise ValueError(problem)
        return self


def tile_problem(config: GDNDecodeConfig, dim_k: int, dim_v: int, state_v_first: bool) -> Optional[str]:
    """Why ``config`` cannot tile a K x V state, or None."""
    if dim_v % config.block_v:
        return f"block_v={config.block_v} does not divide V={dim_v}"
    try:
        tile = thread_tile(dim_k, config.block_v, config.threads, state_v_first)
    except ValueError as err:
        return str(err)
    if tile.cells > MAX_STATE_CELLS:
        return (f"{config.threads} threads would hold {tile.cells} state cells each (at most {MAX_STATE_CELLS}); "
                f"use more threads or a smaller block_v")
    return None


def refuse(spec: CallSpec) -> Optional[str]:
    """Why the decode kernel cannot serve ``spec``, or None."""
    if spec.device.type != "cuda":
        return f"tl.gdn_decode runs on CUDA devices; this call is on {spec.device.type}"
    if not spec.arch.startswith("sm") or int(spec.arch[2:]) < 80:
        return f"tl.gdn_decode needs sm80 or newer; the device is {spec.arch}"
    if spec.mode != "decode":
        return f"tl.gdn_decode serves single-token decode, not {spec.mode}"
    return shape_problem("tl.gdn_decode", spec)


def default(spec: CallSpec) -> GDNDecodeConfig:
    """64 state cells per thread key-major, 32 value-major: many 16-byte loads in flight per
    thread is what keeps HBM busy. 32-wide V tiles, or 64-wide for a 128-wide key-major state
    once those tiles number WIDE_TILES_PER_SM an SM: a 64-wide tile reads its rows in 256-byte
    runs instead of 128-byte ones. The sweeps behind it: docs/history.md (GDN on the H200).
    """
    v_first = spec.flag("state_v_first", False)
    cells = 32 if v_first else 64
    tiles = spec.batch * spec.value_heads * spec.dim_v // 64
    block_v = 64 if not v_first and spec.dim_k == 128 and tiles >= WIDE_TILES_PER_SM * sm_count(spec.device, spec.arch) else 32
    return GDNDecodeConfig(block_v=block_v, threads=spec.dim_k * block_v // cells)


def build(config: GDNDecodeConfig, spec: CallSpec) -> Callable:
    """Compile the program for ``spec`` and return ``launch(q, k, v, g, beta, initial_state, ...)``."""
    from tileops.kernels.launch.decode import DecodeLauncher  # here: it imports TileLang

    problem = refuse(spec) or tile_problem(config, spec.dim_k, spec.dim_v, bool(spec.flag("state_v_first", False)))
    if problem:
        raise ValueError(problem)
    return DecodeLauncher(config, spec)


KERNEL = register(KernelDef(
    name="tl.gdn_decode",
    family="gdn",
    archs=frozenset({"sm90"}),
    config_model=GDNDecodeConfig,
    build=build,
    refuse=refuse,
    default=default,
    modules=("tileops.kernels.gdn.decode",),
))

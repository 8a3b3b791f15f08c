"""The plan of a decode step (pure Python, no compiler): how the threads of a CTA split a
K x block_v state tile, the config space of that split, its default, and what a decode kernel
takes of a call. Shared by every family's decode kernel."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch

from tileops.callspec import CallSpec
from tileops.kernels.config import TiledConfig
from tileops.kernels.hardware import MAX_STATE_CELLS, VEC, sm_count

K_THREADS_V_FIRST = 8  # threads along K for the value-major layout: 128-byte row segments


@dataclass(frozen=True)
class ThreadTile:
    """A thread holds ``ek`` K-positions times ``ev`` V-positions of the tile.

    ``tk`` threads share one set of columns and are summed over; threads tx and tx + k_stride
    hold neighbouring K-pieces of the same columns. ``tv`` threads cover the tile's columns.
    """

    tk: int
    tv: int
    ek: int
    ev: int
    k_stride: int

    @property
    def cells(self) -> int:
        """State cells (fp32 registers) per thread."""
        return self.ek * self.ev


@dataclass(frozen=True)
class DecodeShape:
    """Everything one compiled program is specialised on; the batch size stays symbolic."""

    heads: int
    value_heads: int
    dim_k: int
    dim_v: int
    dtype: str
    g_dtype: str
    beta_dtype: str
    a_log_dtype: str
    dt_bias_dtype: str
    block_v: int
    threads: int
    state_v_first: bool
    has_state: bool
    scale: float
    l2norm: bool
    beta_sigmoid: bool
    neg_eigval: bool
    gate_in_kernel: bool
    gate: str = "scalar"  # "none", "scalar" (one decay per head) or "channel" (one per key channel)
    delta: bool = True  # the delta rule; False: the plain gated sum, no beta
    state_dtype: str = "float32"  # the state as stored; the arithmetic is fp32 whatever it is
    has_dt_bias: bool = True  # an in-kernel gate's dt_bias is given (KDA's is optional)
    lower_bound: Optional[float] = None  # KDA's in-kernel gate: lower_bound * sigmoid(e^A_log x)


def thread_tile(dim_k: int, block_v: int, threads: int, state_v_first: bool) -> ThreadTile:
    """The split of a K x block_v tile over ``threads``; ValueError says why none fits.

    16-byte vectors run along the state's contiguous axis (V key-major, K value-major), next
    lanes take next vectors so a warp reads whole 128-byte segments, and each thread takes a
    contiguous run of the other axis.
    """
    if state_v_first:
        tk = min(K_THREADS_V_FIRST, dim_k // VEC)
        tv = threads // tk
        if tv == 0 or block_v % tv:
            raise ValueError(f"{threads} threads ({tk} along K) do not tile {block_v} value rows")
        return ThreadTile(tk=tk, tv=tv, ek=dim_k // tk, ev=block_v // tv, k_stride=1)
    tv = block_v // VEC
    if threads % tv:
        raise ValueError(f"{threads} threads are not a multiple of the {tv} threads that span block_v={block_v}")
    tk = threads // tv
    if dim_k % tk:
        raise ValueError(f"{threads} threads ({tk} along K) do not tile K={dim_k} rows")
    return ThreadTile(tk=tk, tv=tv, ek=dim_k // tk, ev=VEC, k_stride=tv)


@dataclass(frozen=True)
class DecodeRule:
    """What a family's step computes: its gate ("none", "scalar" per head, "channel" per key
    channel) and whether it is the delta rule (else the plain gated sum)."""

    gate: str
    delta: bool


DELTA_SCALAR = DecodeRule("scalar", True)  # GDN's step


# 64-wide V tiles an SM must take for them to replace 32-wide ones: measured ahead at 124 (B256),
# while up to B16 at HV32 (below 8) keeps the 32-wide tiles measured best there before.
WIDE_TILES_PER_SM = 8


class DecodeConfig(TiledConfig):
    """One CTA updates a K x ``block_v`` tile of one head's state with ``threads`` threads.

    ``min_blocks`` is 1 (no occupancy hint); the field keeps stored configs valid.
    """

    block_v: Literal[32, 64] = 32
    threads: Literal[32, 64, 128] = 128
    min_blocks: Literal[1] = 1

    def problem(self, spec: CallSpec) -> Optional[str]:
        return tile_problem(self, spec.dim_k, spec.dim_v, bool(spec.flag("state_v_first", False)))


def tile_problem(config: DecodeConfig, dim_k: int, dim_v: int, state_v_first: bool) -> Optional[str]:
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


def default_config(spec: CallSpec) -> DecodeConfig:
    """64 state cells per thread key-major, 32 value-major: many 16-byte loads in flight per
    thread is what keeps HBM busy. 32-wide V tiles, or 64-wide for a 128-wide key-major state
    once those tiles number WIDE_TILES_PER_SM an SM: a 64-wide tile reads its rows in 256-byte
    runs instead of 128-byte ones. The sweeps behind it: docs/history.md (GDN on the H200).
    """
    v_first = spec.flag("state_v_first", False)
    cells = 32 if v_first else 64
    tiles = spec.batch * spec.value_heads * spec.dim_v // 64
    block_v = 64 if not v_first and spec.dim_k == 128 and tiles >= WIDE_TILES_PER_SM * sm_count(spec.device, spec.arch) else 32
    return DecodeConfig(block_v=block_v, threads=spec.dim_k * block_v // cells)


def decode_problem(kernel: str, spec: CallSpec, modes: tuple[str, ...], dtypes: tuple[torch.dtype, ...]
                   ) -> Optional[str]:
    """Why a decode kernel cannot serve ``spec``: not a CUDA device of sm80 or newer, not one of
    its modes, tokens of another dtype, a state other than square 64 or 128 wide, or value heads
    that do not group over the key heads. None when it can."""
    if spec.device.type != "cuda":
        return f"{kernel} runs on CUDA devices; this call is on {spec.device.type}"
    if not spec.arch.startswith("sm") or int(spec.arch[2:]) < 80:
        return f"{kernel} needs sm80 or newer; the device is {spec.arch}"
    if spec.mode not in modes:
        return f"{kernel} serves single-token decode, not {spec.mode}"
    if spec.dtype not in dtypes:
        names = " or ".join(str(d).removeprefix("torch.") for d in dtypes)
        return f"{kernel} takes {names} tokens, not {spec.dtype_name}"
    if spec.dim_k != spec.dim_v or spec.dim_k not in (64, 128):
        return f"{kernel} needs a square 64- or 128-wide state, not K={spec.dim_k}, V={spec.dim_v}"
    if spec.value_heads % spec.heads:
        return f"{kernel} needs HV a multiple of H, not H={spec.heads}, HV={spec.value_heads}"
    return None

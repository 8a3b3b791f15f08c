"""How the threads of a decode CTA split a K x block_v state tile (pure Python, no compiler)."""

from __future__ import annotations

from dataclasses import dataclass

from tileops.kernels.hardware import VEC

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

"""The fused walk's matrix moves address its V and output tiles exactly as TileLang lays them out
(``make_swizzled_layout``, the layout the copy engine writes the V tile in)."""

from __future__ import annotations

import itertools

import pytest
from tilelang.layout import make_swizzled_layout
from tvm import tirx

from tileops.kernels.blocks.walk_moves import SOURCE


def moves_element(token: int, value: int) -> int:
    """Where ``walk_moves``' ``swizzled_element`` puts (token, value) of one stage: 64-value panels,
    each [64][64] with a token's 16-byte groups permuted by token mod 8."""
    return (value >> 6) * 4096 + token * 64 + ((((value >> 3) & 7) ^ (token & 7)) << 3) + (value & 7)


def flat(index, shape) -> int:
    out = 0
    for i, n in zip(index, shape):
        out = out * n + int(i)
    return out


@pytest.mark.parametrize("stages, width", [(1, 128), (2, 128), (3, 128), (2, 64)])
def test_matrix_moves_address_tilelangs_swizzle(stages, width):
    tile = tirx.decl_buffer((stages, 64, width), "bfloat16", name="tile", scope="shared.dyn")
    layout = make_swizzled_layout(tile)
    shape = [int(n) for n in layout.get_output_shape()]
    for s, token, value in itertools.product(range(stages), range(64), range(width)):
        placed = flat(layout.map_forward_index([s, token, value]), shape)
        assert placed == s * 64 * width + moves_element(token, value), (s, token, value)


def test_the_device_code_is_the_one_checked():
    assert ("(value >> 6) * 4096 + token * 64 + ((((value >> 3) & 7) ^ (token & 7)) << 3)" in SOURCE)

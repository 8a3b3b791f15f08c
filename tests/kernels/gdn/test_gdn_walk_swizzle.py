"""The fused walk's matrix moves address its V and output tiles exactly as TileLang lays them out
(``make_swizzled_layout``, the layout the copy engine writes the V tile in)."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess

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


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_the_device_code_addresses_as_checked(tmp_path):
    """``swizzled_element`` of the device code, compiled for the host, gives the addresses checked above."""
    body = re.search(r"__device__ __forceinline__ int swizzled_element\(.*?\n}\n", SOURCE, re.S).group(0)
    program = tmp_path / "swizzle.cpp"
    program.write_text("#include <cstdio>\n#define __device__\n#define __forceinline__ inline\n" + body +
                       "int main() { for (int t = 0; t < 64; ++t) for (int v = 0; v < 128; v += 8)"
                       " std::printf(\"%d\\n\", swizzled_element(t, v)); }\n")
    subprocess.run(["c++", "-o", str(tmp_path / "swizzle"), str(program)], check=True, timeout=120)
    out = subprocess.run([str(tmp_path / "swizzle")], capture_output=True, text=True, check=True).stdout.split()
    assert [int(x) for x in out] == [moves_element(t, v) for t in range(64) for v in range(0, 128, 8)]

"""The value-major walk's transposing moves by 8 × 8 matrix loads and stores (``walk_moves='matrix'``).

A value-major walk holds Sᵀ and its products with value rows across the warps (16 rows a warp)
and tokens along the columns, while the chunk's V tile and the output rows are [token][value] in
memory. Two moves cross between them every chunk:

- Xᵀ = Vᵀ − (Sᵀ Kᵀ) diag(f_x), the A operand of Xᵀ T'ᵀ: Vᵀ by ``ldmatrix .trans`` (four
  instructions a thread) instead of one 16-bit shared load per element (32);
- Oᵀ out: by ``stmatrix .trans`` into a [token][value] tile (four instructions instead of 32
  16-bit stores), then each token's 16 values of the warp (32 bytes) to global memory by two
  lanes. A warp reads back only the columns it wrote, so the output needs no barrier across
  warps: the walk's warpgroups do not meet around the output tile.

Both tiles are laid out as the copy engine writes the V tile: panels of 64 values, each
[token][64] in the 128-byte swizzle (a token's 16-byte groups permuted by token mod 8), so an
8 × 8 move's rows are whole 16-byte groups and its eight rows hit distinct banks.

Register fragments follow wgmma's layout for a 64-row tile per warpgroup: element 4n + 2h + c of
a thread is value row 16·warp + 8h + lane/4, token 8n + 2(lane % 4) + c. ``SOURCE`` goes into the
kernel's prelude after ``wy_merge.SOURCE`` and ``wy_registers.SOURCE``, whose ``pack2``
and ``shared_address`` it uses.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.blocks.wy_merge import HALF_TYPES

SOURCE = r"""
namespace tileops_gdn {

template <typename H> __device__ __forceinline__ float2 unpack2(unsigned v);
template <> __device__ __forceinline__ float2 unpack2<__nv_bfloat16>(unsigned v) {
  return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
}
template <> __device__ __forceinline__ float2 unpack2<__half>(unsigned v) {
  return __half22float2(*reinterpret_cast<__half2*>(&v));
}

// The element of (token, value) in a [token][value] tile of 64-value panels, each [64][64] in the
// 128-byte swizzle; value is a multiple of 8 (a 16-byte group).
__device__ __forceinline__ int swizzled_element(int token, int value) {
  return (value >> 6) * 4096 + token * 64 + ((((value >> 3) & 7) ^ (token & 7)) << 3);
}

// Row r of matrix m of an 8 x 8 x 4 move, as lane 8m + r gives it: token 16q + 8(m / 2) + r,
// values 16 warp + 8(m % 2) ... + 7.
__device__ __forceinline__ int matrix_row(int q, int lane, int warp) {
  const int m = lane >> 3, r = lane & 7;
  return swizzled_element(16 * q + 8 * (m >> 1) + r, 16 * warp + 8 * (m & 1));
}

// x (the warp's A-operand fragment, 16-bit) = V^T - ks diag(f), unmasked: T' has zero rows and
// columns for the tokens past the sequence's end, so theirs reach nothing.
// ks: the S^T K^T accumulator fragment (fp32); v: the chunk's V tile; f: f_x of the chunk's tokens.
template <typename H>
__device__ __forceinline__ void x_operand(void* x, const float* ks, const void* v, const float* f, int thread) {
  const int warp = thread >> 5, lane = thread & 31, t = lane & 3;
  const unsigned short* tile = static_cast<const unsigned short*>(v);
  unsigned* out = static_cast<unsigned*>(x);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    unsigned w[4];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "r"(shared_address(tile + matrix_row(q, lane, warp))));
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int n = 2 * q + (m >> 1), i = 4 * n + 2 * (m & 1), j = 8 * n + 2 * t;
      const float2 vj = unpack2<H>(w[m]);
      const float2 fj = *reinterpret_cast<const float2*>(f + j);
      out[i >> 1] = pack2<H>(vj.x - fj.x * ks[i], vj.y - fj.y * ks[i + 1]);
    }
  }
}

// Rows lo..hi-1 of the warp's 16 value columns of O^T (the accumulator fragment o, fp32) to the
// output rows at out (row stride out_ld), through the warp's columns of the [token][value] tile at
// element tile_offset of tile_ptr.
template <typename H>
__device__ __forceinline__ void output_rows(const float* o, void* tile_ptr, int tile_offset, void* out_ptr, int out_ld,
                                            int lo, int hi, int thread) {
  const int warp = thread >> 5, lane = thread & 31;
  unsigned short* tile = static_cast<unsigned short*>(tile_ptr) + tile_offset;
  unsigned short* out = static_cast<unsigned short*>(out_ptr);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    unsigned w[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int i = 4 * (2 * q + (m >> 1)) + 2 * (m & 1);
      w[m] = pack2<H>(o[i], o[i + 1]);
    }
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n"
                 :: "r"(shared_address(tile + matrix_row(q, lane, warp))), "r"(w[0]), "r"(w[1]), "r"(w[2]),
                    "r"(w[3]) : "memory");
  }
  __syncwarp();
  uint4 rows[4];  // all four loads before any store, so that their latencies overlap
  const int col = 16 * warp + 8 * (lane & 1);
#pragma unroll
  for (int p = 0; p < 4; ++p) rows[p] = *reinterpret_cast<const uint4*>(tile + swizzled_element(16 * p + (lane >> 1), col));
  __syncwarp();
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    const int row = 16 * p + (lane >> 1);
    if (lo <= row && row < hi) *reinterpret_cast<uint4*>(out + row * out_ld + col) = rows[p];
  }
}

}  // namespace tileops_gdn
"""


def matrix_moves(dtype: str):
    """Two macros for a value-major walk whose threads are ``thread`` 0..(rows / 16 · 32 − 1), on
    [S, 64, V] tiles laid out by ``make_swizzled_layout`` (``SOURCE``'s panels): ``x_operand``
    fills the A-operand fragment ``x_a`` of Xᵀ T'ᵀ from the S Kᵀ accumulator ``ks_f``, stage
    ``s`` of the V tiles ``v_s`` and stage ``so`` of the factors ``f_s`` ([S', 4, C]), with no
    mask (for a T' that is zero past the sequence's end);
    ``output_rows`` stores rows lo..hi of Oᵀ (``o_f``) to rows t0.. of value head hv of ``o``
    ([tokens, HV, V]) from value column v0, through stage ``stage`` of ``tile`` (the chunk's V
    tile once a warp has read its columns of it, or an output tile). Needs ``SOURCE`` in the
    prelude. TileLang sees the V tile and the factors read and the output written; the tile it
    does not see at all, so it puts no barrier around it."""
    half = HALF_TYPES[dtype]

    @T.macro
    def x_operand(x_a, ks_f, v_s, f_s, s, so, thread):
        T.call_extern("handle", f"tileops_gdn::x_operand<{half}>", x_a.data, ks_f.data,
                      T.access_ptr(v_s[s, 0, 0], "r"), T.access_ptr(f_s[so, 0, 0], "r"), thread)

    @T.macro
    def output_rows(o_f, tile, stage, o, t0, hv, v0, lo, hi, thread):
        T.call_extern("handle", f"tileops_gdn::output_rows<{half}>", o_f.data, tile.data,
                      stage * tile.shape[1] * tile.shape[2], T.access_ptr(o[t0, hv, v0], "w"),
                      o.shape[1] * o.shape[2], lo, hi, thread)

    return x_operand, output_rows

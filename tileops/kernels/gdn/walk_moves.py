"""The value-major walk's transposing moves by 8 × 8 matrix loads and stores (``walk_moves='matrix'``).

A value-major walk holds Sᵀ and its products with value rows across the warps (16 rows a warp)
and tokens along the columns, while the chunk's V tile and the output rows are [token][value] in
memory. Two moves cross between them every chunk:

- Xᵀ = Vᵀ − (Sᵀ Kᵀ) diag(f_x), the A operand of Xᵀ T'ᵀ: Vᵀ by ``ldmatrix .trans`` (four
  instructions a thread) instead of one 16-bit shared load per element (32);
- Oᵀ out: by ``stmatrix .trans`` into a [token][value] tile (four instructions instead of 32
  16-bit stores), then each token's 16 values of the warp (32 bytes) to global memory by two
  lanes. A warp reads back only the columns it wrote, so the output needs no barrier across
  warps: the walk's warpgroups no longer meet twice a chunk around the output tile.

Register fragments follow wgmma's layout for a 64-row tile per warpgroup: element 4n + 2h + c of
a thread is value row 16·warp + 8h + lane/4, token 8n + 2(lane % 4) + c. ``SOURCE`` goes into the
kernel's prelude after ``wy_merge.SOURCE`` and ``first_pass_registers.SOURCE``, whose ``pack2``
and ``shared_address`` it uses.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.gdn.wy_merge import HALF_TYPES

SOURCE = r"""
namespace tileops_gdn {

template <typename H> __device__ __forceinline__ float2 unpack2(unsigned v);
template <> __device__ __forceinline__ float2 unpack2<__nv_bfloat16>(unsigned v) {
  return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
}
template <> __device__ __forceinline__ float2 unpack2<__half>(unsigned v) {
  return __half22float2(*reinterpret_cast<__half2*>(&v));
}

// Row r of matrix m of an 8 x 8 x 4 move, as lane 8m + r gives it: token 16q + 8(m / 2) + r,
// values 16 warp + 8(m % 2) ... + 7 of a [token][value] tile with row stride ld (16-bit elements).
__device__ __forceinline__ int matrix_row(int q, int lane, int warp, int ld) {
  const int m = lane >> 3, r = lane & 7;
  return (16 * q + 8 * (m >> 1) + r) * ld + 16 * warp + 8 * (m & 1);
}

// x (the warp's A-operand fragment, 16-bit) = V^T - ks diag(f), tokens outside [lo, hi) zero;
// ks: the S^T K^T accumulator fragment (fp32); v: the chunk's V tile; f: f_x of the chunk's tokens.
template <typename H>
__device__ __forceinline__ void x_operand(void* x, const float* ks, const void* v, int ld, const float* f,
                                          int lo, int hi, int thread) {
  const int warp = thread >> 5, lane = thread & 31, t = lane & 3;
  const unsigned short* tile = static_cast<const unsigned short*>(v);
  unsigned* out = static_cast<unsigned*>(x);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    unsigned w[4];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "r"(shared_address(tile + matrix_row(q, lane, warp, ld))));
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int n = 2 * q + (m >> 1), i = 4 * n + 2 * (m & 1), j = 8 * n + 2 * t;
      const float2 vj = unpack2<H>(w[m]);
      const float2 fj = *reinterpret_cast<const float2*>(f + j);
      const float x0 = (lo <= j && j < hi) ? vj.x - fj.x * ks[i] : 0.f;
      const float x1 = (lo <= j + 1 && j + 1 < hi) ? vj.y - fj.y * ks[i + 1] : 0.f;
      out[i >> 1] = pack2<H>(x0, x1);
    }
  }
}

// Rows lo..hi-1 of the warp's 16 value columns of O^T (the accumulator fragment o, fp32) to the
// output rows at out (row stride out_ld), through the warp's columns of the [token][value] tile at
// element tile_offset of tile_ptr.
template <typename H>
__device__ __forceinline__ void output_rows(const float* o, void* tile_ptr, int tile_offset, int ld, void* out_ptr,
                                            int out_ld, int lo, int hi, int thread) {
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
                 :: "r"(shared_address(tile + matrix_row(q, lane, warp, ld))), "r"(w[0]), "r"(w[1]), "r"(w[2]),
                    "r"(w[3]) : "memory");
  }
  __syncwarp();
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    const int row = 16 * p + (lane >> 1), col = 16 * warp + 8 * (lane & 1);
    if (lo <= row && row < hi) {
      *reinterpret_cast<uint4*>(out + row * out_ld + col) = *reinterpret_cast<const uint4*>(tile + row * ld + col);
    }
  }
  __syncwarp();
}

}  // namespace tileops_gdn
"""

def matrix_moves(dtype: str):
    """Two macros for a value-major walk whose threads are ``thread`` 0..(rows / 16 · 32 − 1):
    ``x_operand`` fills the A-operand fragment ``x_a`` of Xᵀ T'ᵀ from the S Kᵀ accumulator
    ``ks_f``, stage ``s`` of the V tiles ``v_s`` ([S, C, ld]) and stage ``so`` of the factors
    ``f_s`` ([S', 4, C]); ``output_rows`` stores rows lo..hi of Oᵀ (``o_f``) to rows t0.. of value
    head hv of ``o`` ([tokens, HV, V]) from value column v0, through ``tile``: a [C, ld] tile, or
    stage ``stage`` of [S, C, ld] tiles (the V tile a warp has read its columns of). Needs
    ``SOURCE`` in the prelude. TileLang sees the V tile and the factors read and the output
    written; the tile it does not see at all, so it puts no barrier around it."""
    half = HALF_TYPES[dtype]

    @T.macro
    def x_operand(x_a, ks_f, v_s, f_s, s, so, lo, hi, thread):
        T.call_extern("handle", f"tileops_gdn::x_operand<{half}>", x_a.data, ks_f.data,
                      T.access_ptr(v_s[s, 0, 0], "r"), v_s.shape[2], T.access_ptr(f_s[so, 0, 0], "r"), lo, hi, thread)

    @T.macro
    def output_rows(o_f, tile, stage, o, t0, hv, v0, lo, hi, thread):
        rows, ld = tile.shape[-2], tile.shape[-1]
        T.call_extern("handle", f"tileops_gdn::output_rows<{half}>", o_f.data, tile.data,
                      stage * rows * ld if len(tile.shape) == 3 else 0, ld, T.access_ptr(o[t0, hv, v0], "w"),
                      o.shape[1] * o.shape[2], lo, hi, thread)

    return x_operand, output_rows

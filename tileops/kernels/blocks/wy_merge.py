"""(I + A)⁻¹ of a 64-token chunk from the inverses of its diagonal 16 × 16 blocks, on the tensor
cores from registers: the two-pass first pass's WY solve (``chunk_prep``) after its forward
substitution. ``SOURCE`` also holds the fp32-to-16-bit packing and the m16n8k16 product that
the fused kernel's first pass (``wy_registers``) builds on.

With A strictly lower and D_i⁻¹ the inverse of diagonal block i of I + A, the blocks of
(I + A)⁻¹ below the diagonal follow by block forward substitution,

    T_ij = −D_i⁻¹ Σ_{k=j..i−1} A_ik T_kj,    T_jj = D_j⁻¹,

one level per distance i − j: warp i of the warpgroup forms T_i,i−level at each level, so a level
is one or a few 16 × 16 × 16 products (``mma.sync``, operands rounded to the input dtype, fp32
accumulation) and a 128-thread barrier, with no shared-memory round trip through a tensor-core
operand layout. The diagonal blocks stay exact to fp32. TileLang's own tiles take 64 × 64
products only, which made the same merge three rounds of stores, barriers and waits.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

BLOCK = 16  # rows of the diagonal blocks: one m16n8k16 product's M and K
SCRATCH_LD = 20  # fp32 row stride of a warp's 16 × 16 scratch block: conflict-free operand loads
BARRIER = 12  # named barrier of the first-pass warpgroup's merge (TileLang's own take low ids)

SOURCE = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace tileops_gdn {

template <typename H> __device__ __forceinline__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&v);
}
template <> __device__ __forceinline__ unsigned pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&v);
}

// c (16 x 8, fp32) += a (16 x 16) * b (16 x 8), in mma.sync's fragment layouts.
template <typename H> __device__ __forceinline__ void mma16816(float* c, const unsigned* a, const unsigned* b);
template <> __device__ __forceinline__ void mma16816<__nv_bfloat16>(float* c, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> __device__ __forceinline__ void mma16816<__half>(float* c, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Block (r0, c0), 16 x 16, of a row-major fp32 tile with row stride ld, as the A operand.
template <typename H>
__device__ __forceinline__ void load_a(const float* m, int ld, int r0, int c0, int lane, unsigned* a) {
  const float* p = m + (r0 + (lane >> 2)) * ld + c0 + (lane & 3) * 2;
  a[0] = pack2<H>(p[0], p[1]);
  a[1] = pack2<H>(p[8 * ld], p[8 * ld + 1]);
  a[2] = pack2<H>(p[8], p[9]);
  a[3] = pack2<H>(p[8 * ld + 8], p[8 * ld + 9]);
}

// Block (r0, c0), 16 x 8, as the B operand.
template <typename H>
__device__ __forceinline__ void load_b(const float* m, int ld, int r0, int c0, int lane, unsigned* b) {
  const float* p = m + (r0 + (lane & 3) * 2) * ld + c0 + (lane >> 2);
  b[0] = pack2<H>(p[0], p[ld]);
  b[1] = pack2<H>(p[8 * ld], p[9 * ld]);
}

// acc (16 x 16 as two 16 x 8 halves) += block (r0, c0) of x times block (r1, c1) of y.
template <typename H>
__device__ __forceinline__ void block_mma(float (*acc)[4], const float* x, int ldx, int r0, int c0,
                                          const float* y, int ldy, int r1, int c1, int lane) {
  unsigned a[4], b[2];
  load_a<H>(x, ldx, r0, c0, lane, a);
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    load_b<H>(y, ldy, r1, c1 + 8 * n, lane, b);
    mma16816<H>(acc[n], a, b);
  }
}

// scale * acc into block (r0, c0) of a row-major fp32 tile.
__device__ __forceinline__ void store_block(float* m, int ld, int r0, int c0, int lane, float (*acc)[4], float scale) {
  float* p = m + (r0 + (lane >> 2)) * ld + c0 + (lane & 3) * 2;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    p[8 * n] = scale * acc[n][0];
    p[8 * n + 1] = scale * acc[n][1];
    p[8 * ld + 8 * n] = scale * acc[n][2];
    p[8 * ld + 8 * n + 1] = scale * acc[n][3];
  }
}

// a: A (64 x 64, strictly lower, fp32, row stride ld); d: the same shape, holding D_i^-1 on its
// diagonal blocks; the blocks below them are written with those of (I + A)^-1. scratch: four
// 16 x scratch_ld fp32 blocks, one per warp. Called by the 128 threads of one warpgroup.
template <typename H>
__device__ __forceinline__ void wy_merge(const float* a, float* d, float* scratch, int ld, int scratch_ld,
                                         int thread, int barrier) {
  const int warp = thread >> 5, lane = thread & 31;
  float* y = scratch + warp * 16 * scratch_ld;
  asm volatile("bar.sync %0, 128;\n" ::"r"(barrier) : "memory");
#pragma unroll
  for (int level = 1; level < 4; ++level) {
    const int j = warp - level;
    if (j >= 0) {
      float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      for (int k = j; k < warp; ++k) {
        block_mma<H>(acc, a, ld, 16 * warp, 16 * k, d, ld, 16 * k, 16 * j, lane);
      }
      store_block(y, scratch_ld, 0, 0, lane, acc, 1.f);
      __syncwarp();
      float out[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      block_mma<H>(out, d, ld, 16 * warp, 16 * warp, y, scratch_ld, 0, 0, lane);
      store_block(d, ld, 16 * warp, 16 * j, lane, out, -1.f);
      __syncwarp();
    }
    asm volatile("bar.sync %0, 128;\n" ::"r"(barrier) : "memory");
  }
}

__device__ __forceinline__ void wy_merge_bf16(const float* a, float* d, float* scratch, int ld, int scratch_ld,
                                              int thread, int barrier) {
  wy_merge<__nv_bfloat16>(a, d, scratch, ld, scratch_ld, thread, barrier);
}
__device__ __forceinline__ void wy_merge_f16(const float* a, float* d, float* scratch, int ld, int scratch_ld,
                                             int thread, int barrier) {
  wy_merge<__half>(a, d, scratch, ld, scratch_ld, thread, barrier);
}

}  // namespace tileops_gdn
"""

_SUFFIX = {"bfloat16": "bf16", "float16": "f16"}
HALF_TYPES = {"bfloat16": "__nv_bfloat16", "float16": "__half"}  # the CUDA type of each 16-bit dtype


def block_merge(chunk: int, dtype: str):
    """A macro for the 128 threads of one warpgroup (``thread`` 0..127): the blocks of (I + A)⁻¹
    below the diagonal into ``d_s``, from A (``a_s``) and the diagonal blocks' inverses already in
    ``d_s`` (both fp32, [chunk, ld]); ``w_s`` ([4 · BLOCK, SCRATCH_LD] fp32) is scratch. Needs
    ``SOURCE`` in the kernel's prelude."""
    assert chunk == 4 * BLOCK, "one warp per block row"

    @T.macro
    def merge(a_s, d_s, w_s, thread):
        T.call_extern("handle", f"tileops_gdn::wy_merge_{_SUFFIX[dtype]}", T.address_of(a_s[0, 0]),
                      T.address_of(d_s[0, 0]), T.address_of(w_s[0, 0]), a_s.shape[1], SCRATCH_LD, thread, BARRIER)

    return merge

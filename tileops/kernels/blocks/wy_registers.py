"""The fused kernel's first pass on the products' accumulator registers: decays, masks, factors
and T' = (I + A)⁻¹ diag(β) with no fp32 tile in shared memory.

The first-pass warpgroup holds K Kᵀ and K Qᵀ of a 64-token chunk as two 64 × 64 wgmma
accumulators: warp w rows 16w … 16w + 15, element 4n + 2h + c of a lane row 16w + 8h + lane/4,
column 8n + 2(lane % 4) + c. Its 16 × 16 block b (columns 16b …) is elements 8b … 8b + 7, the
eight floats of an m16n8k16 accumulator pair, so a block turns into an mma.sync A operand by
packing pairs and into a B operand by transposing its four 8 × 8 tiles (``movmatrix``).

``chunk_gates``: every warp forms the gates' prefix sum by shuffles (two tokens a lane) and the
chunk's four factor rows are written, while the products run. ``chunk_pairs`` then applies the
decays and masks in place (A below the diagonal, Mᵀ on and above it, one exponential per pair).

``chunk_inverse``: with D_w the diagonal blocks of A, X_w = (I + D_w)⁻¹ and N_wj = X_w A_wj
(j < w), I + A = X⁻¹ (I + N) and N⁴ = 0, so T'_wj = R_wj X_j diag(β_j) with R = (I + N)⁻¹ by
block substitution: R_10 = −N_10, R_20 = −N_20 + N_21 N_10, R_31 = −Z with Z = N_31 − N_32 N_21,
R_30 = −N_30 + Z N_10 + N_32 N_20. Warp w forms X_w and its own N_wj alone; one exchange of
X_j diag(β_j) (j < 3) and N_10, N_20, N_21 through shared memory gives each warp its row blocks.
X_w itself comes from the 8 × 8 halves: P = (I + E)⁻¹ = (I − E)(I + E²)(I + E⁴) for E the two
diagonal 8 × 8 blocks (E⁸ = 0), then X = P − P F P for F the block below them ((P F)² = 0). No
power above E⁴ is formed, so the fp16 operands stay far from overflow for β ≤ 2 and unit keys.
Products take fp16 operands and accumulate in fp32: finer than the 16-bit T' they produce.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures
from tilelang.layout import make_full_bank_swizzled_layout

from tileops.kernels.blocks.wy_merge import BARRIER, HALF_TYPES

SOURCE = r"""
namespace tileops_gdn {

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void group_barrier(int barrier) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(barrier) : "memory");
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kExchangeLd = 24;
constexpr int kExchangeBlock = 16 * kExchangeLd;
constexpr unsigned kNegate = 0x80008000u;  // the sign bits of an fp16 pair

// A 16 x 16 block (eight accumulator floats) as an A operand: four fp16 pairs.
__device__ __forceinline__ void half_operand(const float* f, unsigned* a) {
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = pack2<__half>(f[2 * i], f[2 * i + 1]);
}

// The B operand of the block an A operand holds: its 8 x 8 tiles transposed.
__device__ __forceinline__ void b_operand(const unsigned* a, unsigned* b) {
#pragma unroll
  for (int i = 0; i < 4; ++i) asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(b[i]) : "r"(a[i]));
}

__device__ __forceinline__ void negated(const unsigned* a, unsigned* n) {
#pragma unroll
  for (int i = 0; i < 4; ++i) n[i] = a[i] ^ kNegate;
}

// c (16 x 16 accumulator) += a b.
__device__ __forceinline__ void mma_block(float* c, const unsigned* a, const unsigned* b) {
  mma16816<__half>(c, a, b);
  mma16816<__half>(c + 4, a, b + 2);
}

// Element i of a block: 1 on the diagonal.
__device__ __forceinline__ float identity(int i, int lane) {
  return ((i >> 2) == ((i >> 1) & 1) && (lane >> 2) == 2 * (lane & 3) + (i & 1)) ? 1.f : 0.f;
}

// An A operand to slot `slot` of the exchange (row-major fp16 blocks), and a slot as a B operand.
__device__ __forceinline__ unsigned slot_row(const unsigned short* exchange, int slot, int lane) {
  const int m = lane >> 3;
  return shared_address(exchange + slot * kExchangeBlock + (8 * (m & 1) + (lane & 7)) * kExchangeLd + 8 * (m >> 1));
}
__device__ __forceinline__ void put_block(unsigned short* exchange, int slot, const unsigned* a, int lane) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :: "r"(slot_row(exchange, slot, lane)), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]) : "memory");
}
__device__ __forceinline__ void slot_b_operand(const unsigned short* exchange, int slot, unsigned* b, int lane) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3]) : "r"(slot_row(exchange, slot, lane)) : "memory");
}

// x = (I + D)^-1 for the warp's 16 x 16 strictly lower block d.
__device__ __forceinline__ void diagonal_inverse(const float* d, float* x, int lane) {
  unsigned ea[4], eb[4], below[4] = {0u, 0u, 0u, 0u};
  half_operand(d, ea);
  below[1] = ea[1];  // F: rows 8-15, columns 0-7
  ea[1] = 0u;        // E = diag(E_1, E_2); rows 0-7 of columns 8-15 are above the diagonal
  b_operand(ea, eb);
  float e2[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  mma_block(e2, ea, eb);
  unsigned e2a[4], e2b[4];
  half_operand(e2, e2a);
  b_operand(e2a, e2b);
  float e4[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  mma_block(e4, e2a, e2b);
  float y[8];  // (I - E)(I + E^2)
#pragma unroll
  for (int i = 0; i < 8; ++i) y[i] = identity(i, lane) - (i == 2 || i == 3 ? 0.f : d[i]) + e2[i];
  unsigned minus_e[4];
  negated(ea, minus_e);
  mma_block(y, minus_e, e2b);
  unsigned ya[4], e4a[4], e4b[4];
  half_operand(y, ya);
  half_operand(e4, e4a);
  b_operand(e4a, e4b);
  float p[8];  // (I - E)(I + E^2)(I + E^4)
#pragma unroll
  for (int i = 0; i < 8; ++i) p[i] = y[i];
  mma_block(p, ya, e4b);
  unsigned pa[4], pb[4], fb[4];
  half_operand(p, pa);
  b_operand(pa, pb);
  b_operand(below, fb);
  float z[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  mma_block(z, pa, fb);  // P F
  unsigned za[4];
  half_operand(z, za);
  negated(za, za);
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = p[i];
  mma_block(x, za, pb);  // P - P F P
}

// A 64 x 64 accumulator of the warpgroup, in 16-bit, to a [64][64] tile in the 128-byte swizzle
// (row r's 16-byte groups of columns permuted by r mod 8), by four matrix stores a thread.
template <typename H>
__device__ __forceinline__ void store_swizzled(const float* acc, void* tile, int thread) {
  const int warp = thread >> 5, lane = thread & 31, m = lane >> 3;
  const int row = 16 * warp + 8 * (m & 1) + (lane & 7);
  char* base = static_cast<char*>(tile) + row * 128;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = 4 * (2 * q + (i >> 1)) + 2 * (i & 1);
      w[i] = pack2<H>(acc[e], acc[e + 1]);
    }
    const unsigned address = shared_address(base + (((2 * q + (m >> 1)) ^ (row & 7)) << 4));
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
                 :: "r"(address), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
  }
}

// The chunk's gates: gamma (log2 units) of tokens 2 lane and 2 lane + 1 into gates[0], gates[1]
// (every warp forms the prefix sum by shuffles), and its factor rows f ([4][64]: f_x, f_o, f_s,
// f_c) from its tokens' gates g (zero past the sequence's end, row hi - 1 its last) and with the
// L2 norm the inverse norms rk, rq of keys and queries. Needs no product: it runs while K K^T and
// K Q^T do.
template <bool L2>
__device__ __forceinline__ void chunk_gates(const float* g, const float* rk, const float* rq, float* f, float* gates,
                                            float scale, int hi, int thread, int barrier) {
  const int lane = thread & 31;
  group_barrier(barrier);  // the gates, step sizes and norms of this chunk are written
  const float2 x = *reinterpret_cast<const float2*>(g + 2 * lane);
  float s = x.x + x.y;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, s, off);
    if (lane >= off) s += y;
  }
  const float odd = s * kLog2e, even = (s - x.y) * kLog2e;
  gates[0] = even;
  gates[1] = odd;
  const int token = thread & 63;
  const float te = __shfl_sync(0xffffffffu, even, token >> 1), to = __shfl_sync(0xffffffffu, odd, token >> 1);
  const float le = __shfl_sync(0xffffffffu, even, (hi - 1) >> 1), lo = __shfl_sync(0xffffffffu, odd, (hi - 1) >> 1);
  const float gt = (token & 1) ? to : te, last = ((hi - 1) & 1) ? lo : le;
  const float key = L2 ? rk[token] : 1.f;
  if (thread < 64) {
    const float e = exp2_approx(gt);
    f[token] = e * key;
    f[64 + token] = scale * e * (L2 ? rq[token] : 1.f);
  } else {
    f[128 + token] = exp2_approx(last - gt) * key;
    f[192 + token] = exp2_approx(last);
  }
}

// kk <- A and kq <- M^T in place of K K^T and K Q^T, with the decays of chunk_gates' gates, the
// step sizes beta and with the L2 norm the inverse norms rk, rq; without QUERIES kq is not touched.
template <bool L2, bool QUERIES>
__device__ __forceinline__ void chunk_pairs(float* kk, float* kq, const float* gates, const float* beta,
                                            const float* rk, const float* rq, float scale, int thread) {
  const int warp = thread >> 5, lane = thread & 31, t = lane & 3;
  const float even = gates[0], odd = gates[1];
  const int r0 = 16 * warp + (lane >> 2);
  float gr[2], br[2], kr[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
    const float ge = __shfl_sync(0xffffffffu, even, r >> 1), go = __shfl_sync(0xffffffffu, odd, r >> 1);
    gr[h] = (r & 1) ? go : ge;
    br[h] = beta[r] * (L2 ? rk[r] : 1.f);
    kr[h] = scale * (L2 ? rk[r] : 1.f);
  }
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const float gc[2] = {__shfl_sync(0xffffffffu, even, 4 * n + t), __shfl_sync(0xffffffffu, odd, 4 * n + t)};
    const int col = 8 * n + 2 * t;
    const float2 kc = L2 ? *reinterpret_cast<const float2*>(rk + col) : make_float2(1.f, 1.f);
    const float2 qc = L2 ? *reinterpret_cast<const float2*>(rq + col) : make_float2(1.f, 1.f);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int e = 4 * n + 2 * h + c;
        const bool lower = col + c < r0 + 8 * h;
        const float decay = exp2_approx(lower ? gr[h] - gc[c] : gc[c] - gr[h]);
        kk[e] = lower ? br[h] * (c ? kc.y : kc.x) * decay * kk[e] : 0.f;
        if (QUERIES) kq[e] = lower ? 0.f : kr[h] * (c ? qc.y : qc.x) * decay * kq[e];
      }
    }
  }
}

// a <- (I + A)^-1 diag(beta) in place of A (strictly lower); exchange: six fp16 blocks.
__device__ __forceinline__ void chunk_inverse(float* a, const float* beta, void* exchange_tile, int thread,
                                              int barrier) {
  unsigned short* exchange = static_cast<unsigned short*>(exchange_tile);
  const int warp = thread >> 5, lane = thread & 31, t = lane & 3;
  float d[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) d[i] = 0.f;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
#pragma unroll
    for (int i = 0; i < 8; ++i) d[i] = b == warp ? a[8 * b + i] : d[i];
  }
  float x[8];
  diagonal_inverse(d, x, lane);
  const float2 b0 = *reinterpret_cast<const float2*>(beta + 16 * warp + 2 * t);
  const float2 b1 = *reinterpret_cast<const float2*>(beta + 16 * warp + 8 + 2 * t);
  const float xb[8] = {x[0] * b0.x, x[1] * b0.y, x[2] * b0.x, x[3] * b0.y,
                       x[4] * b1.x, x[5] * b1.y, x[6] * b1.x, x[7] * b1.y};
  unsigned xa[4], xba[4];
  half_operand(x, xa);
  half_operand(xb, xba);
  float n[3][8];
  unsigned na[3][4];
#pragma unroll
  for (int j = 0; j < 3; ++j) {
#pragma unroll
    for (int i = 0; i < 8; ++i) n[j][i] = 0.f;
    if (j < warp) {
      unsigned aj[4], bj[4];
      half_operand(a + 8 * j, aj);
      b_operand(aj, bj);
      mma_block(n[j], xa, bj);
    }
    half_operand(n[j], na[j]);
  }
  group_barrier(barrier);  // every warp has read the previous chunk's exchange
  if (warp < 3) put_block(exchange, warp, xba, lane);
  if (warp == 1) put_block(exchange, 3, na[0], lane);
  if (warp == 2) {
    put_block(exchange, 4, na[0], lane);
    put_block(exchange, 5, na[1], lane);
  }
  group_barrier(barrier);
  float c[3][8];
#pragma unroll
  for (int j = 0; j < 3; ++j) {
#pragma unroll
    for (int i = 0; i < 8; ++i) c[j][i] = 0.f;
  }
  unsigned b[4], m[4];
  if (warp == 1) {  // T_10 = -N_10 X_0 b
    negated(na[0], m);
    slot_b_operand(exchange, 0, b, lane);
    mma_block(c[0], m, b);
  } else if (warp == 2) {
    float r[8];  // R_20 = -N_20 + N_21 N_10
#pragma unroll
    for (int i = 0; i < 8; ++i) r[i] = -n[0][i];
    slot_b_operand(exchange, 3, b, lane);
    mma_block(r, na[1], b);
    half_operand(r, m);
    slot_b_operand(exchange, 0, b, lane);
    mma_block(c[0], m, b);
    negated(na[1], m);  // T_21 = -N_21 X_1 b
    slot_b_operand(exchange, 1, b, lane);
    mma_block(c[1], m, b);
  } else if (warp == 3) {
    float z[8];  // Z = N_31 - N_32 N_21
#pragma unroll
    for (int i = 0; i < 8; ++i) z[i] = n[1][i];
    negated(na[2], m);
    slot_b_operand(exchange, 5, b, lane);
    mma_block(z, m, b);
    unsigned za[4];
    half_operand(z, za);
    float r[8];  // R_30 = -N_30 + Z N_10 + N_32 N_20
#pragma unroll
    for (int i = 0; i < 8; ++i) r[i] = -n[0][i];
    slot_b_operand(exchange, 3, b, lane);
    mma_block(r, za, b);
    slot_b_operand(exchange, 4, b, lane);
    mma_block(r, na[2], b);
    half_operand(r, m);
    slot_b_operand(exchange, 0, b, lane);
    mma_block(c[0], m, b);
    negated(za, m);  // T_31 = -Z X_1 b
    slot_b_operand(exchange, 1, b, lane);
    mma_block(c[1], m, b);
    negated(na[2], m);  // T_32 = -N_32 X_2 b
    slot_b_operand(exchange, 2, b, lane);
    mma_block(c[2], m, b);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int i = 0; i < 8; ++i) a[8 * j + i] = j < warp ? c[j < 3 ? j : 2][i] : (j == warp ? xb[i] : 0.f);
  }
}

}  // namespace tileops_gdn
"""


def register_first_pass(*, l2norm: bool, scale: float, dtype: str, queries: bool = True):
    """Four macros for the 128 threads of the first-pass warpgroup (``thread`` 0..127), on the
    64 × 64 accumulators of K Kᵀ (``kk_f``) and K Qᵀ (``kq_f``): ``gates`` writes the factors
    into stage ``so`` of ``f_s`` ([S, 4, 64] fp32) from the chunk's gates ``g_s`` (and norms
    ``rk_s``, ``rq_s``) and leaves the thread's two prefix sums in the local ``gates_l`` (2 fp32),
    needing no product; ``pairs`` turns the products into A and Mᵀ with those and the step sizes
    ``b_s``; ``inverse`` turns A into
    T', ``x_s`` its exchange ([EXCHANGE_BLOCKS · 16, EXCHANGE_LD] fp16); ``store`` writes an
    accumulator in ``dtype`` to stage ``so`` of a [S, 64, 64] tile laid out by ``swizzled``.
    Needs ``wy_merge.SOURCE`` then ``SOURCE`` in the kernel's prelude. ``gates`` and ``inverse``
    synchronise the warpgroup themselves. Without ``queries`` (a walk with no outputs) ``pairs``
    forms A alone and leaves ``kq_f`` as it is."""
    flag = "true" if l2norm else "false"
    with_queries = "true" if queries else "false"
    half = HALF_TYPES[dtype]

    @T.macro
    def gates(g_s, rk_s, rq_s, f_s, so, gates_l, hi, thread):
        T.call_extern("handle", f"tileops_gdn::chunk_gates<{flag}>", T.access_ptr(g_s[0], "r"),
                      T.access_ptr(rk_s[0], "r"), T.access_ptr(rq_s[0], "r"), T.access_ptr(f_s[so, 0, 0], "w"),
                      gates_l.data, T.float32(scale), hi, thread, BARRIER)

    @T.macro
    def pairs(kk_f, kq_f, gates_l, b_s, rk_s, rq_s, thread):
        T.call_extern("handle", f"tileops_gdn::chunk_pairs<{flag}, {with_queries}>", kk_f.data, kq_f.data, gates_l.data,
                      T.access_ptr(b_s[0], "r"), T.access_ptr(rk_s[0], "r"), T.access_ptr(rq_s[0], "r"),
                      T.float32(scale), thread)

    @T.macro
    def inverse(kk_f, b_s, x_s, thread):
        T.call_extern("handle", "tileops_gdn::chunk_inverse", kk_f.data, T.access_ptr(b_s[0], "r"),
                      T.address_of(x_s[0, 0]), thread, BARRIER)

    @T.macro
    def store(acc_f, tile_s, so, thread):
        T.call_extern("handle", f"tileops_gdn::store_swizzled<{half}>", acc_f.data, T.access_ptr(tile_s[so, 0, 0], "w"),
                      thread)

    return gates, pairs, inverse, store


def swizzled(tile):
    """The 128-byte swizzle ``store`` writes, for a [S, 64, 64] 16-bit tile the tensor cores read."""
    return make_full_bank_swizzled_layout(tile)

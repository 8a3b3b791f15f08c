"""The pairs inside the 16-row blocks of a chunk under one decay per key channel (KDA, GLA):
Σ_c k_ic k_jc 2^{γ_ic − γ_jc} (A, j < i) and Σ_c q_ic k_jc 2^{γ_ic − γ_jc} (M, j ≤ i), γ the
cumulative log decay in base 2 (docs/kda-gated-products.md).

A warp takes one block and half of the channels. About the block's middle row m the pair's
factor is 2^{γ_i − γ_m} · 2^{γ_m − γ_j}, one factor on each operand of an m16n8k16 product. The
factors reach 2^{±d}, d the largest |γ_i − γ_m| of the warp's block and channels, so the
operands take bf16 (fp32's range) in two parts, its rounding and the rest: the three products
hi·hi, hi·lo and lo·hi keep each term to about 2^-16 of itself, finer than the fp16 operands of
the products between blocks. Where d exceeds LIMIT (decays beyond 5.5 a token, possible without
a ``lower_bound``), the warp forms the pairs one by one in fp32 instead: each lane takes the row
pair p, 15 − p (15 pairs below the diagonal between them) and a quarter of the channels, one
exponential per pair and channel, and shuffles sum the quarters. Either way the sums land in A's
and D's fp32 tiles as ``store_pair`` says: the first half's at (i, j), the second's mirrored at (j, i)
with its diagonal in D's padding column C, for the caller to add.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.blocks.wy_merge import BLOCK

LIMIT = 64  # the largest |γ_i − γ_m| (base 2) the products take: a factor at most 2^64, a kept term at most |x|²
SKEW = 8  # in the one-by-one form, the channel quarters start SKEW apart: a warp's loads of γ and k
# meet few bank conflicts (1.4 ways on average, against 3.5 with interleaved channels)

SOURCE = r"""
namespace tileops_gdn {

// a, b as bf16 pairs: hi their rounding, lo the rest, rounded.
__device__ __forceinline__ void split_bf16(float a, float b, unsigned& hi, unsigned& lo) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  float2 f = __bfloat1622float2(h);
  __nv_bfloat162 l = __floats2bfloat162_rn(a - f.x, b - f.y);
  hi = *reinterpret_cast<unsigned*>(&h);
  lo = *reinterpret_cast<unsigned*>(&l);
}

// Two adjacent 16-bit elements (p 4-byte aligned) in one load.
template <typename X> __device__ __forceinline__ float2 load_pair(const X* p) {
  struct alignas(4) Pair { X v[2]; };
  const Pair pair = *reinterpret_cast<const Pair*>(p);
  return make_float2(float(pair.v[0]), float(pair.v[1]));
}

// Sum (i, j) of a block, by this warp: at (i, j) for the first half of the channels, mirrored at
// (j, i) for the second (its diagonal into D's column C).
template <bool DELTA>
__device__ __forceinline__ void store_pair(float* a, float* d, int ld, int C, bool mirror, int i, int j,
                                           float sum_a, float sum_m) {
  if (j > i) return;
  if (mirror) {
    if (j == i) {
      d[i * ld + C] = sum_m;
      return;
    }
    const int t = i; i = j; j = t;
  }
  if (DELTA && i != j) a[i * ld + j] = sum_a;
  d[i * ld + j] = sum_m;
}

// The tensor-core form; false (and nothing stored) where the warp's factors leave 2^{+-LIMIT}.
template <bool DELTA, int K, typename X>
__device__ __forceinline__ bool block_pairs_mma(const X* q, const X* k, int ldx, const float* gam, int ldg,
                                                float* a, float* d, int ld, int C, int blk, int half, int lane,
                                                float limit) {
  const int g = lane >> 2, t = lane & 3;
  const int row0 = blk * 16, r[2] = {row0 + g, row0 + g + 8}, m = row0 + 8;
  float acc_a[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
  float acc_m[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
  float widest = 0.f;
#pragma unroll
  for (int s = 0; s < K / 32; ++s) {
    // The product's 16 channels of step s, in any order: lane t takes c0 .. c0 + 3 (k-columns 2t,
    // 2t + 1, 2t + 8, 2t + 9), K / 8 apart between lanes, so that a warp's loads of a channel
    // pair of q and k (one word) fall in 32 banks and its loads of γ in 16.
    const int c0 = half * (K / 2) + t * (K / 8) + 4 * s;
    unsigned ak[2][4], aq[2][4], b[2][2][2];  // [hi/lo][fragment register] and B by [hi/lo][token][register]
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = c0 + 2 * h;
      const float* g0 = gam + c * ldg;
      const float* g1 = g0 + ldg;
      const float m0 = g0[m], m1 = g1[m];
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const float d0 = g0[r[n]] - m0, d1 = g1[r[n]] - m1;
        widest = fmaxf(widest, fmaxf(fabsf(d0), fabsf(d1)));
        const float up0 = exp2f(d0), up1 = exp2f(d1), down0 = exp2f(-d0), down1 = exp2f(-d1);
        const float2 kk = load_pair(k + r[n] * ldx + c), qq = load_pair(q + r[n] * ldx + c);
        const int f = n + 2 * h;  // A's register: rows g (n = 0) and g + 8, k-columns 2t (h = 0) and 2t + 8
        if (DELTA) split_bf16(kk.x * up0, kk.y * up1, ak[0][f], ak[1][f]);
        split_bf16(qq.x * up0, qq.y * up1, aq[0][f], aq[1][f]);
        split_bf16(kk.x * down0, kk.y * down1, b[0][n][h], b[1][n][h]);  // B's token g + 8n, k-rows 2t + 8h
      }
    }
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      if (DELTA) {
        mma16816<__nv_bfloat16>(acc_a[n], ak[0], b[0][n]);
        mma16816<__nv_bfloat16>(acc_a[n], ak[0], b[1][n]);
        mma16816<__nv_bfloat16>(acc_a[n], ak[1], b[0][n]);
      }
      mma16816<__nv_bfloat16>(acc_m[n], aq[0], b[0][n]);
      mma16816<__nv_bfloat16>(acc_m[n], aq[0], b[1][n]);
      mma16816<__nv_bfloat16>(acc_m[n], aq[1], b[0][n]);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) widest = fmaxf(widest, __shfl_xor_sync(0xffffffffu, widest, o));
  if (!(widest <= limit)) return false;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = r[e >> 1], j = row0 + 8 * n + 2 * t + (e & 1);
      store_pair<DELTA>(a, d, ld, C, half == 1, i, j, acc_a[n][e], acc_m[n][e]);
    }
  }
  return true;
}

// The one-by-one form, exact in fp32 whatever the decays.
template <bool DELTA, int K, typename X>
__device__ __forceinline__ void block_pairs_exact(const X* q, const X* k, int ldx, const float* gam, int ldg,
                                                  float* a, float* d, int ld, int C, int blk, int half, int lane,
                                                  int skew) {
  constexpr int SLOTS = 15, SPAN = K / 8;
  const int quarter = lane & 3, p = lane >> 2;
  const int lo = blk * 16 + p, hi = blk * 16 + 15 - p;
  float acc_a[SLOTS], acc_m[SLOTS + 2];
#pragma unroll
  for (int u = 0; u < SLOTS + 2; ++u) acc_m[u] = 0.f;
#pragma unroll
  for (int u = 0; u < SLOTS; ++u) acc_a[u] = 0.f;
  for (int s = 0; s < SPAN; ++s) {
    const int c = half * (K / 2) + quarter * SPAN + (s + skew * (quarter >> 1)) % SPAN;
    const float* gc = gam + c * ldg;
    const float g_lo = gc[lo], g_hi = gc[hi];
    const float k_lo = float(k[lo * ldx + c]), k_hi = float(k[hi * ldx + c]);
    const float q_lo = float(q[lo * ldx + c]), q_hi = float(q[hi * ldx + c]);
    acc_m[SLOTS] += q_lo * k_lo;
    acc_m[SLOTS + 1] += q_hi * k_hi;
#pragma unroll
    for (int u = 0; u < SLOTS; ++u) {  // slot u: row lo's column u, or row hi's column u - p
      const bool first = u < p;
      const int j = blk * 16 + (first ? u : u - p);
      // Across sequences the exponent may be large: the caller drops those entries.
      const float kj = float(k[j * ldx + c]) * exp2f((first ? g_lo : g_hi) - gc[j]);
      if (DELTA) acc_a[u] += (first ? k_lo : k_hi) * kj;
      acc_m[u] += (first ? q_lo : q_hi) * kj;
    }
  }
#pragma unroll
  for (int u = 0; u < SLOTS + 2; ++u) {
    acc_m[u] += __shfl_xor_sync(0xffffffffu, acc_m[u], 1);
    acc_m[u] += __shfl_xor_sync(0xffffffffu, acc_m[u], 2);
  }
  if (DELTA) {
#pragma unroll
    for (int u = 0; u < SLOTS; ++u) {
      acc_a[u] += __shfl_xor_sync(0xffffffffu, acc_a[u], 1);
      acc_a[u] += __shfl_xor_sync(0xffffffffu, acc_a[u], 2);
    }
  }
#pragma unroll
  for (int u = 0; u < SLOTS; ++u) {
    if (u % 4 == quarter) {
      const bool first = u < p;
      store_pair<DELTA>(a, d, ld, C, half == 1, first ? lo : hi, blk * 16 + (first ? u : u - p),
                        DELTA ? acc_a[u] : 0.f, acc_m[u]);
    }
  }
  if (quarter == 0) {
    store_pair<DELTA>(a, d, ld, C, half == 1, lo, lo, 0.f, acc_m[SLOTS]);
    store_pair<DELTA>(a, d, ld, C, half == 1, hi, hi, 0.f, acc_m[SLOTS + 1]);
  }
}

// Warp w of the two warpgroups: block w % 4, channel half w / 4.
template <bool DELTA, int K, typename X>
__device__ __forceinline__ void channel_block_pairs(const X* q, const X* k, int ldx, const float* gam, int ldg,
                                                    float* a, float* d, int ld, int C, int thread, float limit,
                                                    int skew) {
  const int warp = thread >> 5, lane = thread & 31, blk = warp & 3, half = warp >> 2;
  if (!block_pairs_mma<DELTA, K>(q, k, ldx, gam, ldg, a, d, ld, C, blk, half, lane, limit)) {
    block_pairs_exact<DELTA, K>(q, k, ldx, gam, ldg, a, d, ld, C, blk, half, lane, skew);
  }
}

}  // namespace tileops_gdn
"""


def block_pairs(chunk: int, dim_k: int, delta: bool):
    """A macro for the 256 threads of two warpgroups: the pairs inside every block of the chunk
    into ``a_s`` (with ``delta``; without it pass ``d_s`` again) and ``d_s``, both fp32 [chunk, ld] with ld > chunk, from the
    q and k tiles ([chunk, ldx], 16-bit) and γ by channel ([K, ldg], fp32, base 2). Needs
    ``wy_merge.SOURCE`` and ``SOURCE`` in the kernel's prelude; the caller syncs before and after."""
    assert chunk == 4 * BLOCK and dim_k % 32 == 0, "four 16-row blocks; 16-channel steps in each half"
    delta_flag = "true" if delta else "false"

    @T.macro
    def pairs(q_s, k_s, gam_s, a_s, d_s, tx):
        T.call_extern("handle", f"tileops_gdn::channel_block_pairs<{delta_flag}, {dim_k}>",
                      T.address_of(q_s[0, 0]), T.address_of(k_s[0, 0]), q_s.shape[1], T.address_of(gam_s[0, 0]),
                      gam_s.shape[1], T.address_of(a_s[0, 0]), T.address_of(d_s[0, 0]), d_s.shape[1], chunk, tx,
                      T.float32(LIMIT), SKEW)

    return pairs

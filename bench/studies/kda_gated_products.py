"""How accurate a chunk's per-channel gated products are under ways of forming them on tensor
cores, emulated in float64 with each product's operands rounded as the tensor cores would round
them (the groundwork of KDA's and GLA's first pass).

With γ the per-channel cumulative log decay inside a C-token chunk, the chunk needs

    A_ij = Σ_c k_ic k_jc e^{γ_ic − γ_jc}  (i > j)        M_ij = Σ_c q_ic k_jc e^{γ_ic − γ_jc}  (i ≥ j)

e^{γ_i − γ_j} is not a product of a row factor and a column factor one can take outside, so a
tensor-core product needs the gate folded into its operands about a reference row r:
x̃_i = x_i ⊙ e^{γ_i − γ_r}, k̃_j = k_j ⊙ e^{γ_r − γ_j}. Over a whole chunk the factors overflow
(e^{5·63} at KDA's lower bound of −5 a token), so the chunk is cut into 16-row sub-chunks and
each block (I, J) takes its own reference:

- "FLA 0.6.0": off-diagonal blocks with r the first row of sub-chunk I (every factor ≤ 1) and
  tf32 operands; diagonal blocks elementwise in fp32 with the exact exponent differences (as we
  read its chunk_kda intra-chunk kernels).
- "ref first, bf16": off-diagonal blocks as above with bf16 operands; diagonal blocks elementwise
  in fp32.
- "ref middle, bf16, all blocks": every block on the tensor cores, r the middle row (8) of
  sub-chunk I; the diagonal blocks' factors reach e^{±5·8}, inside bf16's range.
- "ref first, fp16": as "ref first, bf16" with fp16 operands (every factor ≤ 1: no overflow).
- "ref first, fp16; diagonal ref middle, tf32": every block on the tensor cores; the diagonal
  blocks folded about their middle row with tf32 operands (fp32's range holds e^{±40}).
- "ref first, fp16; diagonal ref middle, bf16 x 2" (the kernel's, ``blocks.channel_pairs``): the
  diagonal blocks folded about their middle row, each operand in bf16 as its rounding and the
  rest, three products (hi·hi + hi·lo + lo·hi).
- "whole chunk about each channel's midpoint, bf16 x 2": the whole chunk as one fold, each
  channel about the midpoint of its γ (any constant per channel cancels), two bf16 parts and
  three products, where every factor stays within 2^{±WHOLE_REACH}; other chunks as the kernel's.
  Also printed: the share of chunks of each kind that fit.

The elementwise diagonal blocks cost an exponential per (i, j, channel): 4 · 16 · 16 · 128 a chunk
and operand, about 0.5 ms of the SFUs for KDA's B4×T8192 H32. A folded block costs two per (row,
channel).

Chunks: random unit keys under strong gates (each channel's decay in (−5, 0) a token), the
strongest (−5 on every channel), Mamba-like rates (1.6 to 0.001 across channels), weak gates
(about −1e-3) and keys that agree (one key repeated, strong gates).

    python bench/studies/kda_gated_products.py [--chunks 20]

Prints the worst ‖X − X_exact‖ / ‖X_exact‖ of A and M over the chunks of each kind.
"""

from __future__ import annotations

import argparse

import numpy as np

from wy_inverse_precision import rounded  # noqa: E402  (a sibling study: run from its folder's parent)

from tileops.kernels.blocks.window_fold import FOLD_REACH as WHOLE_REACH  # the kernel's reach

C, B, K = 64, 16, 128  # chunk, sub-chunk, key width
LOWER_BOUND = -5.0
TF32, BF16, FP16 = 10, 7, 0  # explicit mantissa bits (0: fp16 and its range)


def gates(kind: str, rng: np.random.Generator) -> np.ndarray:
    """Per-token, per-channel log decays [C, K]."""
    if kind in ("strong", "agreeing keys"):
        return LOWER_BOUND / (1 + np.exp(-2 * rng.standard_normal((C, K))))
    if kind == "strongest":
        return np.full((C, K), LOWER_BOUND)
    if kind == "mamba":
        rates = np.exp(np.linspace(np.log(1.6), np.log(1e-3), K))
        return -rates * np.log1p(np.exp(rng.standard_normal((C, K)))) / np.log(2)
    if kind == "weak":
        return -1e-3 * (0.5 + rng.random((C, K)))
    raise ValueError(kind)


def chunk(kind: str, rng: np.random.Generator):
    """(q, k, γ): 16-bit q and unit keys, float64 cumulative gates."""
    q = rounded(rng.standard_normal((C, K)), BF16)
    k = rng.standard_normal((C, K))
    if kind == "agreeing keys":
        k[:] = k[0]
    k = rounded(k / np.linalg.norm(k, axis=1, keepdims=True), BF16)
    return q, k, np.cumsum(gates(kind, rng), axis=0)


def exact(x: np.ndarray, k: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """Σ_c x_ic k_jc e^{γ_ic − γ_jc} for every i, j (float64; the caller masks)."""
    return np.einsum("ic,jc,ijc->ij", x, k, np.exp(gamma[:, None, :] - gamma[None, :, :]))


def elementwise_fp32(x, k, gamma, rows, cols) -> np.ndarray:
    """A block computed per element in fp32 with the exact exponent differences."""
    with np.errstate(over="ignore"):
        decay = np.exp((gamma[rows, None, :] - gamma[None, cols, :]).astype(np.float32))
    return np.einsum("ic,jc,ijc->ij", x[rows].astype(np.float32), k[cols].astype(np.float32), decay)


def folded_operands(x, k, gamma, rows, cols, ref) -> tuple[np.ndarray, np.ndarray]:
    """A block's operands with the gate folded in about row ``ref``, in fp32."""
    with np.errstate(over="ignore"):
        return ((x[rows] * np.exp(gamma[rows] - gamma[ref])).astype(np.float32),
                (k[cols] * np.exp(gamma[ref] - gamma[cols])).astype(np.float32))


def folded(x, k, gamma, rows, cols, ref, bits) -> np.ndarray:
    """A block as one tensor-core product of the gate-folded operands about row ``ref``."""
    xs, ks = folded_operands(x, k, gamma, rows, cols, ref)
    with np.errstate(over="ignore", invalid="ignore"):
        return (rounded(xs, bits) @ rounded(ks, bits).T).astype(np.float32)


def folded_split(x, k, gamma, rows, cols, ref) -> np.ndarray:
    """As ``folded``, each operand in bf16 as two parts (its rounding, then the rest rounded), the
    three products hi·hi + hi·lo + lo·hi accumulated in fp32."""
    return split_product(*folded_operands(x, k, gamma, rows, cols, ref))


def split_product(xs: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """xs ksᵀ with each operand in bf16 as two parts, hi·hi + hi·lo + lo·hi accumulated in fp32."""
    x_hi, k_hi = rounded(xs, BF16), rounded(ks, BF16)
    x_lo, k_lo = rounded(xs - x_hi, BF16), rounded(ks - k_hi, BF16)
    with np.errstate(over="ignore", invalid="ignore"):
        return (x_hi @ k_hi.T + x_hi @ k_lo.T + x_lo @ k_hi.T).astype(np.float32)


def form(diagonal: str, bits: int, ref_offset: int, diagonal_bits: int = None):
    """A way to form the whole C × C product: blocks (I, J), I ≥ J, off-diagonal ones folded about
    row I·B + ``ref_offset`` with ``bits``-bit operands; diagonal ones elementwise in fp32, or
    folded about ``ref_offset`` too (a first-row reference would overflow there), with
    ``diagonal_bits``-bit operands (default ``bits``)."""
    diagonal_bits = bits if diagonal_bits is None else diagonal_bits

    def product(x, k, gamma):
        out = np.zeros((C, C), np.float32)
        for i in range(C // B):
            rows = slice(i * B, i * B + B)
            for j in range(i + 1):
                cols = slice(j * B, j * B + B)
                if i == j and diagonal == "elementwise":
                    out[rows, cols] = elementwise_fp32(x, k, gamma, rows, cols)
                elif i == j and diagonal == "split":
                    out[rows, cols] = folded_split(x, k, gamma, rows, cols, i * B + B // 2)
                elif i == j:
                    out[rows, cols] = folded(x, k, gamma, rows, cols, i * B + B // 2, diagonal_bits)
                else:
                    out[rows, cols] = folded(x, k, gamma, rows, cols, i * B + ref_offset, bits)
        return out
    return product


def whole_chunk_fits(gamma: np.ndarray) -> bool:
    """Whether every channel's factors about its midpoint stay within 2^{±WHOLE_REACH}."""
    return float(np.max(gamma[0] - gamma[-1])) / 2 * np.log2(np.e) <= WHOLE_REACH


def whole_chunk(x, k, gamma) -> np.ndarray:
    """The whole C × C product as one fold, each channel about the midpoint of its γ over the
    chunk (ρ_c = (γ_0c + γ_{C−1,c}) / 2: any per-channel constant cancels), operands in bf16 as two
    parts, three products; chunks whose factors would leave 2^{±WHOLE_REACH} take the kernel's form."""
    if not whole_chunk_fits(gamma):
        return FORMS["ref first, fp16; diagonal ref middle, bf16 x 2"](x, k, gamma)
    rho = (gamma[0] + gamma[-1]) / 2
    with np.errstate(over="ignore"):
        return split_product((x * np.exp(gamma - rho)).astype(np.float32), (k * np.exp(rho - gamma)).astype(np.float32))


FORMS = {
    "FLA 0.6.0 (ref first, tf32; diagonal fp32)": form("elementwise", TF32, 0),
    "ref first, bf16; diagonal fp32": form("elementwise", BF16, 0),
    "ref middle, bf16, all blocks": form("folded", BF16, B // 2),
    "ref first, fp16; diagonal fp32": form("elementwise", FP16, 0),
    "ref first, fp16; diagonal ref middle, tf32": form("folded", FP16, 0, TF32),
    "ref first, fp16; diagonal ref middle, bf16 x 2": form("split", FP16, 0),
    "whole chunk about each channel's midpoint, bf16 x 2": whole_chunk,
}
KINDS = ("strong", "strongest", "mamba", "weak", "agreeing keys")


def relative(got: np.ndarray, want: np.ndarray, mask: np.ndarray) -> float:
    got, want = np.where(mask, got, 0.0), np.where(mask, want, 0.0)
    with np.errstate(invalid="ignore"):
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
    return float("inf") if not np.isfinite(err) else float(err)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    strict, lower = np.tri(C, k=-1, dtype=bool), np.tri(C, dtype=bool)
    worst = {(f, kind, m): 0.0 for f in FORMS for kind in KINDS for m in "AM"}
    fits = dict.fromkeys(KINDS, 0)
    for kind in KINDS:
        for _ in range(args.chunks):
            q, k, gamma = chunk(kind, rng)
            fits[kind] += whole_chunk_fits(gamma)
            a_exact, m_exact = exact(k, k, gamma), exact(q, k, gamma)
            for name, product in FORMS.items():
                a, m = product(k, k, gamma), product(q, k, gamma)
                worst[name, kind, "A"] = max(worst[name, kind, "A"], relative(a, a_exact, strict))
                worst[name, kind, "M"] = max(worst[name, kind, "M"], relative(m, m_exact, lower))
    print(f"worst relative error over {args.chunks} chunks of each kind (A: K Kᵀ strictly lower; M: Q Kᵀ lower)")
    print(f"{'form':52s}" + "".join(f"{kind:>22s}" for kind in KINDS))
    for name in FORMS:
        cells = "".join(f"{worst[name, kind, 'A']:>10.1e} /{worst[name, kind, 'M']:>9.1e} " for kind in KINDS)
        print(f"{name:52s}{cells}")
    print(f"chunks whose factors about each channel's midpoint stay within 2^±{WHOLE_REACH}: " +
          ", ".join(f"{kind} {fits[kind] / args.chunks:.0%}" for kind in KINDS))


if __name__ == "__main__":
    main()

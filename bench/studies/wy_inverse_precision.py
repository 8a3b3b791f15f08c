"""How accurate the chunk's WY inverse (I + A)⁻¹ is under ways of inverting its diagonal blocks,
emulated in float64 with each product's operands rounded as the tensor cores would round them.

The two-pass first pass inverts the four 16 × 16 diagonal blocks, then merges the blocks below
them with bf16 operands (``wy_merge``). For the diagonal blocks it substitutes in fp32; the
alternatives weighed here are the power series (I + D)⁻¹ = (I − D)(I + D²)(I + D⁴)(I + D⁸) on the
tensor cores, in tf32, in fp16, or in tf32 with each operand split in two (hi + lo, three
products). The last row is the fused kernel's inverse (``wy_registers``) as a whole:
fp16 operands throughout, the diagonal blocks from their 8 × 8 halves, the rest by
R = (I + N)⁻¹ with N_wj = X_w A_wj.
Chunks: random unit keys with GDN-like gates, and every key the same (a run of one repeated
token), with and without decay, and with β up to 2 (negative eigenvalues allowed): there the
powers of D grow large and cancel.

    python bench/studies/wy_inverse_precision.py [--chunks 50]

Prints the worst ‖T − T_exact‖ / ‖T_exact‖ of each method on each kind of chunk.
"""

from __future__ import annotations

import argparse

import numpy as np

C, B, K = 64, 16, 128  # chunk, diagonal block, key width


def rounded(x: np.ndarray, mantissa_bits: int) -> np.ndarray:
    """fp32 values rounded to ``mantissa_bits`` explicit mantissa bits (nearest), as float64;
    0 means fp16 (10 bits, and its range: beyond 65504 is infinite)."""
    if mantissa_bits == 0:
        with np.errstate(over="ignore"):
            return np.asarray(x, np.float32).astype(np.float16).astype(np.float64)
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    drop = 23 - mantissa_bits
    keep = np.uint64((0xFFFFFFFF >> drop) << drop)
    return ((bits + np.uint64(1 << (drop - 1))) & keep).astype(np.uint32).view(np.float32).astype(np.float64)


def product(x: np.ndarray, y: np.ndarray, mantissa_bits: int, split: bool = False) -> np.ndarray:
    """x y with operands rounded, fp32 accumulation; ``split``: each operand as hi + lo, both
    rounded, and hi·hi + hi·lo + lo·hi."""
    xh, yh = rounded(x, mantissa_bits), rounded(y, mantissa_bits)
    out = xh @ yh
    if split:
        out += xh @ rounded(y - yh, mantissa_bits) + rounded(x - xh, mantissa_bits) @ yh
    with np.errstate(over="ignore", invalid="ignore"):
        return out.astype(np.float32)


def power_series(mantissa_bits: int, split: bool = False):
    """(I + D)⁻¹ of a strictly lower 16 × 16 block as the four-factor product."""
    def invert(d: np.ndarray) -> np.ndarray:
        eye = np.eye(B, dtype=np.float32)
        d2 = product(d, d, mantissa_bits, split)
        q = eye - d + d2 - product(d, d2, mantissa_bits, split)
        d4 = product(d2, d2, mantissa_bits, split)
        d8 = product(d4, d4, mantissa_bits, split)
        q = q + product(q, d4, mantissa_bits, split)
        return q + product(q, d8, mantissa_bits, split)
    return invert


METHODS = {
    "fp32 substitution": lambda d: np.linalg.inv(np.eye(B) + d.astype(np.float64)).astype(np.float32),
    "tf32 power series": power_series(10),
    "fp16 power series": power_series(0),
    "3xtf32 power series": power_series(10, split=True),
}


def wy_inverse(a: np.ndarray, invert) -> np.ndarray:
    """(I + A)⁻¹ with the diagonal blocks from ``invert`` and the rest by block forward
    substitution with bf16 operands, as ``wy_merge`` forms it."""
    t = np.zeros((C, C), np.float32)
    block = lambda m, i, j: m[B * i:B * i + B, B * j:B * j + B]  # noqa: E731
    for i in range(C // B):
        t[B * i:B * i + B, B * i:B * i + B] = invert(block(a, i, i))
    for level in range(1, C // B):
        for i in range(level, C // B):
            j = i - level
            acc = sum(product(block(a, i, k), block(t, k, j), 7) for k in range(j, i))
            t[B * i:B * i + B, B * j:B * j + B] = -product(block(t, i, i), acc, 7)
    return t


def half_blocks_inverse(d: np.ndarray) -> np.ndarray:
    """(I + D)⁻¹ of a strictly lower 16 × 16 block as the fused kernel forms it: P = (I + E)⁻¹ =
    (I − E)(I + E²)(I + E⁴) for E the two diagonal 8 × 8 blocks, then P − (P F) P for F the block
    below them, fp16 operands."""
    e = d.copy()
    e[8:, :8] = 0
    f = d - e
    e2 = product(e, e, 0)
    e4 = product(e2, e2, 0)
    y = np.eye(B, dtype=np.float32) - e + e2 + product(-e, e2, 0)
    p = y + product(y, e4, 0)
    return p + product(-product(p, f, 0), p, 0)


def register_inverse(a: np.ndarray) -> np.ndarray:
    """(I + A)⁻¹ as ``wy_registers.chunk_inverse`` forms it (without its diag(β)):
    X_w the diagonal blocks' inverses, N_wj = X_w A_wj, then the blocks of (I + N)⁻¹ X."""
    block = lambda m, i, j: m[B * i:B * i + B, B * j:B * j + B]  # noqa: E731
    x = [half_blocks_inverse(block(a, w, w)) for w in range(4)]
    n = {(w, j): product(x[w], block(a, w, j), 0) for w in range(4) for j in range(w)}
    r20 = -n[2, 0] + product(n[2, 1], n[1, 0], 0)
    z = n[3, 1] - product(n[3, 2], n[2, 1], 0)
    r30 = -n[3, 0] + product(z, n[1, 0], 0) + product(n[3, 2], n[2, 0], 0)
    r = {(1, 0): -n[1, 0], (2, 0): r20, (2, 1): -n[2, 1], (3, 0): r30, (3, 1): -z, (3, 2): -n[3, 2]}
    t = np.zeros((C, C), np.float32)
    for w in range(4):
        t[B * w:B * w + B, B * w:B * w + B] = x[w]
    for (w, j), rwj in r.items():
        t[B * w:B * w + B, B * j:B * j + B] = product(rwj, x[j], 0)
    return t


def chunk(gen: np.random.Generator, kind: str) -> np.ndarray:
    """A = strictly lower diag(β) (e^{γ_i − γ_j} k_i·k_j) of one chunk."""
    keys = gen.standard_normal((C, K))
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    if kind != "random keys":
        keys[:] = keys[0]
    beta = gen.uniform(1.5, 2.0, C) if kind.endswith("β to 2") else gen.uniform(0.1, 0.9, C)
    log_decay = np.log(1 / (1 + np.exp(-(gen.standard_normal(C) + 2.0)))) * 0.5
    gamma = np.cumsum(np.zeros(C) if "no decay" in kind else log_decay)
    return np.tril(beta[:, None] * np.exp(gamma[:, None] - gamma[None, :]) * (keys @ keys.T), -1).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=50)
    args = parser.parse_args()
    gen = np.random.default_rng(0)
    kinds = ("random keys", "one key, decaying", "one key, no decay", "one key, no decay, β to 2")
    inverses = {f"{name}, bf16 merge": (lambda a, invert=invert: wy_inverse(a, invert))
                for name, invert in METHODS.items()}
    inverses["fp16 blocks (fused kernel)"] = register_inverse
    worst = {(m, k): 0.0 for m in inverses for k in kinds}
    for kind in kinds:
        for _ in range(args.chunks):
            a = chunk(gen, kind)
            exact = np.linalg.inv(np.eye(C) + a.astype(np.float64))
            for name, inverse in inverses.items():
                with np.errstate(invalid="ignore", over="ignore"):
                    err = np.linalg.norm(inverse(a) - exact) / np.linalg.norm(exact)
                err = err if np.isfinite(err) else float("inf")
                worst[name, kind] = max(worst[name, kind], err)
    print(" | ".join(["inverse", *kinds]))
    print(" | ".join(["---"] * (len(kinds) + 1)))
    for name in inverses:
        print(" | ".join([name, *(f"{worst[name, k]:.2e}" for k in kinds)]))


if __name__ == "__main__":
    main()

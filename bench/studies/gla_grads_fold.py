"""The backward's gated sums over tokens as one fold per chunk, against the blocks' form, in float64
with the operand roundings (GLA's ``chunk_grads_channel``; dk's sum, dq's is its mirror):

    dk_s = Σ_{t ≥ s} dA_ts q_t ⊙ e^{γ_t − γ_s} = e^{ρ − γ_s} ⊙ (dAᵀ (q ⊙ e^{γ − ρ}))_s

with ρ each channel's midpoint of γ over the chunk. dA (lower triangular) is rounded to bf16 as
the kernel hands it to the tensor cores, and the error is measured against the exact sum on that
dA, so that it is the operands' alone. Forms: the kernel's (the pairs inside each 16-row block
exact, the later blocks about the block's last row with the operand in bf16); the fold with its
operand in bf16; the fold with its operand in two bf16 parts (two products).

    python bench/studies/gla_grads_fold.py [--heads 32]
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tileops.cases import log_decays  # noqa: E402
from tests.kernels.kda.prefill_model import F64, rounded, split_bf16  # noqa: E402  (the kernel model's roundings)

C, BLOCK, K = 64, 16, 128


def bf16(x: torch.Tensor) -> torch.Tensor:
    return rounded(x.to(torch.float32), torch.bfloat16)


def blocks_form(d_a, q, gamma, pair):
    out = torch.zeros_like(q)
    rows = torch.arange(C)
    for blk in range(C // BLOCK):
        own = slice(blk * BLOCK, (blk + 1) * BLOCK)
        lower = rows[own][:, None] >= rows[own][None, :]
        out[:, own] += torch.einsum("hts,htc,htsc->hsc", d_a[:, own, own] * lower, q[:, own], pair[:, own][:, :, own])
        e = (blk + 1) * BLOCK - 1
        if e + 1 < C:
            later = slice(e + 1, C)
            operand = bf16(q[:, later] * (gamma[:, later] - gamma[:, e:e + 1]).exp())
            out[:, own] += (gamma[:, e:e + 1] - gamma[:, own]).exp() * (d_a[:, later, own].mT @ operand)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heads", type=int, default=32)
    heads = parser.parse_args().heads
    gen = torch.Generator().manual_seed(0)
    print(f"relative error of dk's gated sum, {heads} heads of one chunk, K = {K}; the largest half-span of γ (bits)")
    for kind in ("benchmark", "weak", "mamba", "zero"):
        q = torch.randn(heads, C, K, generator=gen, dtype=F64)
        d_a = bf16(torch.randn(heads, C, C, generator=gen, dtype=F64).tril())
        gamma = log_decays(kind, (heads, C, K), lambda s: torch.randn(s, generator=gen, dtype=F64),
                           lambda s: torch.rand(s, generator=gen, dtype=F64), 16.0).to(F64).cumsum(1)
        pair = (gamma[:, :, None, :] - gamma[:, None, :, :]).clamp(max=0).exp()  # [h, t, s, c]
        exact = torch.einsum("hts,htc,htsc->hsc", d_a, q, pair)
        low, high = gamma.amin(1, keepdim=True), gamma.amax(1, keepdim=True)
        rho = (low + high) / 2
        folded = q * (gamma - rho).exp()
        hi, lo = split_bf16(folded)
        forms = {"blocks (today)": blocks_form(d_a, q, gamma, pair),
                 "fold, bf16": (rho - gamma).exp() * (d_a.mT @ bf16(folded)),
                 "fold, bf16 x 2": (rho - gamma).exp() * (d_a.mT @ hi + d_a.mT @ lo)}
        errors = "  ".join(f"{name} {((got - exact).norm() / exact.norm()).item():.1e}" for name, got in forms.items())
        span = ((high - low) / 2 * math.log2(math.e)).amax().item()
        print(f"{kind:10s} {errors}  half-span {span:.1f}")


if __name__ == "__main__":
    main()

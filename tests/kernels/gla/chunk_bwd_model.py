"""GLA's chunked backward as its kernels are to compute it, in float64, from the forward's h.

With γ the log decays summed down each C-token chunk (per key channel, from the chunk's start),
Γ its last row, Q_o = scale q ⊙ e^γ and K_s = k ⊙ e^{Γ − γ} (the first pass's outputs):

- the state gradient walks the chunks backward: dS_{c+1} is the gradient of the state leaving chunk
  c (dht, or zeros, after the last), and dS_c = diag(e^{Γ_c}) dS_{c+1} + Q_oᵀ dO_c;
- per chunk, from S_c = h[:, c] and dS_{c+1}, with M (the forward's masked gated products) and
  dA = scale dO Vᵀ (s ≤ t):
  dv = Mᵀ dO + K_s dS_{c+1};
  dq = scale e^γ ⊙ (dO S_cᵀ) + Σ_{s ≤ t} dA_ts k_s ⊙ e^{γ_t − γ_s};
  dk = e^{Γ − γ} ⊙ (V dS_{c+1}ᵀ) + Σ_{t ≥ s} dA_ts q_t ⊙ e^{γ_t − γ_s};
- dg = the sum from each token to its sequence's end of q ⊙ dq − k ⊙ dk, plus Σ_v dht ⊙ S_T on
  every token (the final state's decay e^{G_T} holds every gate). Past a chunk's end that sum is
  Σ_v S_{c+1} ⊙ dS_{c+1} (the gradient of the next chunk's first log decay, which scales the state
  entering it), so each chunk forms its own: the sum down to its last row, plus that term.

The gated sums over tokens go by 16-row blocks, as the forward's products over channels do: a
block against the rows before it about its first row r (dq: e^{γ_t − γ_r} ⊙ (dA · (k ⊙ e^{γ_r − γ_s})))
or after it about its last row e (dk: e^{γ_e − γ_s} ⊙ (dAᵀ · (q ⊙ e^{γ_t − γ_e}))), every factor at
most 1, one tensor-core product each; the products' operand is carried from block to block (the
rows already in take the decay between the two reference rows, the next block's rows join with
their own factors); the pairs inside a block one by one. In bf16 (``fold``) a chunk whose every
channel's γ spans at most 2^{±FOLD_REACH} about its midpoint ρ takes one fold instead:
e^{ρ − γ_s} ⊙ (dAᵀ (q ⊙ e^{γ − ρ})) for dk, e^{γ_t − ρ} ⊙ (dA (k ⊙ e^{ρ − γ})) for dq.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from tileops.kernels.blocks.window_fold import FOLD_REACH

F64 = torch.float64
C, BLOCK = 64, 16


def folded_rows(d_a: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor, *, later: bool,
                rounding: Optional[torch.dtype] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``gated_rows`` as one fold about each channel's midpoint ρ of γ: e^{ρ − γ_s} ⊙ (dAᵀ (x ⊙ e^{γ − ρ}))
    (``later``) or e^{γ_t − ρ} ⊙ (dA (x ⊙ e^{ρ − γ})), with ``rounding`` the operand in two bf16 parts;
    and which heads fit (every channel's half-span within FOLD_REACH, base 2)."""
    rho = (gamma[:, :1] + gamma[:, -1:]) / 2  # γ falls down the chunk
    fits = ((gamma[:, 0] - gamma[:, -1]) * math.log2(math.e) <= 2 * FOLD_REACH).all(-1)
    offset = torch.where(fits[:, None, None], gamma - rho, 0.0)  # heads that do not fit: unused
    operand = x * (offset if later else -offset).exp()
    if rounding is not None:
        operand32 = operand.to(torch.float32)
        hi = operand32.to(torch.bfloat16)
        operand = hi.to(F64) + (operand32 - hi.to(torch.float32)).to(torch.bfloat16).to(F64)
    product = d_a.mT @ operand if later else d_a @ operand
    return fits, (-offset if later else offset).exp() * product


def gated_rows(d_a: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor, *, later: bool,
               fold: bool = False, rounding: Optional[torch.dtype] = None) -> torch.Tensor:
    """Σ_{s ≤ t} d_a[t, s] x_s ⊙ e^{γ_t − γ_s} for every row t ([C, K], heads first), or with
    ``later`` Σ_{t ≥ s} d_a[t, s] x_t ⊙ e^{γ_t − γ_s} for every row s: with ``fold`` (the kernel's
    bf16 form) one fold for the heads whose decays allow it; by 16-row blocks otherwise."""
    if fold:
        fits, folded = folded_rows(d_a, x, gamma, later=later, rounding=rounding)
        return torch.where(fits[:, None, None], folded, gated_rows(d_a, x, gamma, later=later))
    out = torch.zeros_like(x)
    rows = torch.arange(C)
    carried = torch.zeros_like(x)  # the rows before (dq) or after (dk) the block, about its reference row
    for blk in (range(C // BLOCK - 2, -1, -1) if later else range(1, C // BLOCK)):
        own = slice(blk * BLOCK, (blk + 1) * BLOCK)
        if later:  # the rows after block J, about its last row e; the block after J joins
            e = (blk + 1) * BLOCK - 1
            joining = slice(e + 1, e + 1 + BLOCK)
            carried = carried * (gamma[:, e + BLOCK:e + BLOCK + 1] - gamma[:, e:e + 1]).exp()
            carried[:, joining] = x[:, joining] * (gamma[:, joining] - gamma[:, e:e + 1]).exp()
            out[:, own] += (gamma[:, e:e + 1] - gamma[:, own]).exp() * (d_a[:, :, own].mT @ carried)
        else:  # the rows before block I, about its first row r; the block before I joins
            r = blk * BLOCK
            joining = slice(r - BLOCK, r)
            carried = carried * (gamma[:, r:r + 1] - gamma[:, r - BLOCK:r - BLOCK + 1]).exp()
            carried[:, joining] = x[:, joining] * (gamma[:, r:r + 1] - gamma[:, joining]).exp()
            out[:, own] += (gamma[:, own] - gamma[:, r:r + 1]).exp() * (d_a[:, own, :] @ carried)
    for blk in range(C // BLOCK):
        own = slice(blk * BLOCK, (blk + 1) * BLOCK)
        # Inside the block, pair by pair (only the lower triangle holds anything).
        g_blk = gamma[:, own]
        pair = (g_blk[:, :, None, :] - g_blk[:, None, :, :]).exp()  # [H, t, s, K]: e^{γ_t − γ_s}
        lower = (rows[own][:, None] >= rows[own][None, :])[None, :, :, None]
        pair = torch.where(lower, pair, 0.0)
        d_blk = d_a[:, own, own]
        if later:
            out[:, own] += torch.einsum("hts,htc,htsc->hsc", d_blk, x[:, own], pair)
        else:
            out[:, own] += torch.einsum("hts,hsc,htsc->htc", d_blk, x[:, own], pair)
    return out


def chunk_bwd(q, k, v, g, h, do, dht: Optional[torch.Tensor], *, scale: float,
              rounding: Optional[torch.dtype] = None, fold: bool = False):
    """(dq, dk, dv, dg) [B, T, H, ·] for equal lengths T a multiple of C, from the forward's
    h [B, T / C + 1, H, K, V]. ``rounding`` (a 16-bit dtype) rounds what the kernels hand the
    tensor cores in it: dA, M, K_s and the states S_c and dS_{c+1} of the products, and dS_{c+1}
    where the walk stores it (dg's term past the chunk takes S_{c+1} in fp32). ``fold``: the gated
    sums over tokens as one fold where the decays allow it (the kernel's form in bf16), its operand
    in two bf16 parts when rounding."""
    def r(x):
        return x if rounding is None else x.to(rounding).to(F64)

    B, T, H, K = q.shape
    NT = T // C
    q, k, v, g, h, do = (x.to(F64) for x in (q, k, v, g, h, do))
    dq, dk, dg = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(q)
    dv = torch.zeros_like(v)
    rows = torch.arange(C)
    causal = rows[:, None] >= rows[None, :]
    for b in range(B):
        chunks = []
        for c in range(NT):  # the first pass's outputs, heads first
            span = slice(c * C, (c + 1) * C)
            qc, kc, vc, oc = (x[b, span].transpose(0, 1) for x in (q, k, v, do))
            gamma = g[b, span].transpose(0, 1).cumsum(1)
            end = gamma[:, -1:]
            pair = (gamma[:, :, None, :] - gamma[:, None, :, :]).exp()
            m = scale * torch.where(causal[None], torch.einsum("htc,hsc,htsc->hts", qc, kc,
                                                             torch.where(causal[None, :, :, None], pair, 0.0)), 0.0)
            chunks.append(dict(q=qc, k=kc, v=vc, do=oc, gamma=gamma, m=m, qo=scale * qc * gamma.exp(),
                               ks=kc * (end - gamma).exp(), decay=end[:, 0].exp()))
        d_state = torch.zeros(H, K, v.shape[-1], dtype=F64) if dht is None else dht[b].to(F64)
        leaving = [None] * NT
        for c in reversed(range(NT)):  # the state gradient's walk
            leaving[c] = d_state
            x = chunks[c]
            d_state = x["decay"][:, :, None] * d_state + x["qo"].mT @ x["do"]
        for c in range(NT):  # every chunk at once
            x, d_next, state = chunks[c], leaving[c], h[b, c]
            span = slice(c * C, (c + 1) * C)
            d_a = r(scale * torch.where(causal[None], x["do"] @ x["v"].mT, 0.0))
            dv[b, span] = (r(x["m"]).mT @ x["do"] + r(x["ks"]) @ r(d_next)).transpose(0, 1)
            dq_c = (scale * x["gamma"].exp() * (x["do"] @ r(state).mT)
                    + gated_rows(d_a, x["k"], x["gamma"], later=False, fold=fold, rounding=rounding))
            dk_c = ((x["gamma"][:, -1:] - x["gamma"]).exp() * (x["v"] @ r(d_next).mT)
                    + gated_rows(d_a, x["q"], x["gamma"], later=True, fold=fold, rounding=rounding))
            dq[b, span], dk[b, span] = dq_c.transpose(0, 1), dk_c.transpose(0, 1)
            past_end = (h[b, c + 1] * r(d_next)).sum(-1)  # [H, K]
            dg[b, span] = ((x["q"] * dq_c - x["k"] * dk_c).flip(1).cumsum(1).flip(1)
                           + past_end[:, None]).transpose(0, 1)
    return dq, dk, dv, dg

"""tl.deltanet_chunk_fwd's algorithm in float64, against the reference: the programs' chunking and
order of operations, and (with ``rounded``) the roundings of their 16-bit operands.

Per chunk of C tokens of one (batch, head), as ``chunk_prep`` (with ``inverse_out``),
``chain_key`` (with ``boundaries``) and ``wy_fast`` compute it:

    A = strictly lower (β_i k_i·k_j)     A⁻ = (I + A)⁻¹     T' = A⁻ diag(β)     M = lower (Q Kᵀ)
    the state S stored at the chunk's start; Δ = T'(V − K S); O = Q S + M Δ; S = S + Kᵀ Δ
    w = A⁻ (β ⊙ K)     u = A⁻ (β ⊙ V)

Rounded, T', M, A⁻, the state's copy that meets K and Q, Δ, β ⊙ K and β ⊙ V are 16-bit operands
of fp32-accumulated products, as in the programs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tileops.reference import recurrent_delta_rule
from tileops.reference.delta_rule.chunk import deltanet_chunk_forward

F64 = torch.float64
C = 64


def model(q, k, v, beta, rounded=None):
    """(o, S, Aw, Au, w, u) of [B, H, S, D] inputs, S a multiple of C."""
    def r(x):
        return x if rounded is None else x.to(rounded).to(F64)
    B, H, L, K = q.shape
    V = v.shape[3]
    o = torch.zeros(B, H, L, V, dtype=F64)
    states = torch.zeros(B, H, L // C + 1, K, V, dtype=F64)
    a_inv = torch.zeros(B, H, L, C, dtype=F64)
    w = torch.zeros(B, H, L, K, dtype=F64)
    u = torch.zeros(B, H, L, V, dtype=F64)
    eye = torch.eye(C, dtype=F64)
    for b in range(B):
        for h in range(H):
            s = torch.zeros(K, V, dtype=F64)
            for c in range(L // C):
                rows = slice(c * C, (c + 1) * C)
                qc, kc, vc, bc = q[b, h, rows], k[b, h, rows], v[b, h, rows], beta[b, h, rows]
                a = (bc[:, None] * (kc @ kc.T)).tril(-1)
                inverse = torch.linalg.solve_triangular(eye + a, eye, upper=False)
                tp, m = r(inverse * bc[None, :]), r((qc @ kc.T).tril())
                states[b, h, c] = s
                delta = tp @ (vc - kc @ r(s))
                o[b, h, rows] = qc @ r(s) + m @ r(delta)
                s = s + kc.T @ r(delta)
                a_inv[b, h, rows] = r(inverse)
                w[b, h, rows] = r(inverse) @ r(bc[:, None] * kc)
                u[b, h, rows] = r(inverse) @ r(bc[:, None] * vc)
            states[b, h, -1] = s
    return o, states, a_inv, a_inv.clone(), w, u


def inputs(gen, B, H, L, D, dtype=None):
    def rnd(*shape):
        x = torch.randn(*shape, generator=gen, dtype=F64)
        return x if dtype is None else x.to(dtype).to(F64)
    q, k = rnd(B, H, L, D), F.normalize(rnd(B, H, L, D), dim=-1)
    if dtype is not None:
        k = k.to(dtype).to(F64)
    v = rnd(B, H, L, D)
    beta = torch.rand(B, H, L, generator=gen, dtype=F64) * 0.9 + 0.05
    return q, k, v, beta


def relative(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("B, H, L, D", [(2, 2, 192, 16), (1, 3, 64, 32)])
def test_the_programs_arithmetic_is_the_reference(rng, B, H, L, D):
    q, k, v, beta = inputs(rng, B, H, L, D)
    ours = model(q, k, v, beta)
    ref = deltanet_chunk_forward(q, k, v, beta, chunk_size=C)
    for name, a, b in zip(("o", "S", "Aw", "Au", "w", "u"), ours, ref):
        assert a.shape == b.shape and relative(a, b) <= 1e-12, name
    o, final = recurrent_delta_rule(*(x.transpose(1, 2) for x in (q, k, v, beta)), scale=1.0)
    assert relative(ours[0], o.transpose(1, 2)) <= 1e-12 and relative(ours[1][:, :, -1], final) <= 1e-12


@pytest.mark.parametrize("dtype, bound", [(torch.bfloat16, 1.5e-2), (torch.float16, 4e-3)])
def test_its_16_bit_operands_stay_within_the_gpu_tests_tolerance(rng, dtype, bound):
    # The GPU tests' bounds (tests/kernels/deltanet/test_deltanet_chunk_fwd_gpu.py) hold for the
    # programs' roundings at D = 128 over 8 chunks, with room to spare.
    q, k, v, beta = inputs(rng, 1, 2, 512, 128, dtype)
    exact = model(q, k, v, beta)
    rounded = model(q, k, v, beta, rounded=dtype)
    worst = max(relative(a, b) for a, b in zip(rounded, exact))
    assert worst <= bound / 2, worst

"""tl.deltanet_chunk_bwd's algorithm in float64: the programs' chunking and order of operations
(``chunk_dh``'s backward walk, then ``chunk_grads`` for every chunk at once) against the
reference's vector-Jacobian product and against autograd through the naive recurrence; with
``rounded``, the roundings of their 16-bit operands.
"""

from __future__ import annotations

import pytest
import torch

from tileops.reference import recurrent_delta_rule
from tileops.reference.backward import deltanet_chunk_backward
from tileops.reference.delta_rule.chunk import deltanet_chunk_forward
from tests.kernels.deltanet.test_deltanet_chunk_fwd_model import C, F64, inputs, relative


def model(do, q, k, v, beta, S, a_inv, w, u, rounded=None):
    """(dq, dk, dv, dbeta) of [B, H, L, D] tensors, L a multiple of C, from the forward's boundary
    states S [B, H, L / C + 1, K, V] and its a_inv, w and u."""
    def r(x):
        return x if rounded is None else x.to(rounded).to(F64)
    B, H, L, K = q.shape
    V = v.shape[3]
    chunks = L // C
    grads = [torch.zeros_like(x) for x in (q, k, v, beta)]
    dq, dk, dv, dbeta = grads
    for b in range(B):
        for h in range(H):
            def rows(c):
                return slice(c * C, (c + 1) * C)
            # chunk_dh: the end states' gradients, last chunk first
            ds = torch.zeros(K, V, dtype=F64)
            dh, dd = [None] * chunks, [None] * chunks
            for c in reversed(range(chunks)):
                qc, kc, wc, doc = (x[b, h, rows(c)] for x in (q, k, w, do))
                dh[c] = r(ds)
                m = r((kc @ qc.T).triu())
                dd[c] = r(m @ doc + kc @ dh[c])
                ds = ds + qc.T @ doc + wc.T @ -dd[c]
            # chunk_grads: every chunk on its own
            for c in range(chunks):
                qc, kc, vc, wc, uc, doc, ac = (x[b, h, rows(c)] for x in (q, k, v, w, u, do, a_inv))
                bc = beta[b, h, rows(c)]
                hs, du = r(S[b, h, c]), dd[c]
                delta = r(uc - wc @ hs)
                p = r((doc @ delta.T).tril())
                dq[b, h, rows(c)] = doc @ hs.T + p @ kc
                dkc = p.T @ qc + delta @ dh[c].T
                dw = r(-(du @ hs.T))
                bk, bv = r(bc[:, None] * kc), r(bc[:, None] * vc)
                tw, tu = ac.T @ dw, ac.T @ du
                dkc = dkc + bc[:, None] * tw
                dv[b, h, rows(c)] = bc[:, None] * tu
                dbc = (tw * kc).sum(1) + (tu * vc).sum(1)
                da_inv = r((dw @ bk.T + du @ bv.T).tril())
                da = -(r(ac.T @ da_inv) @ ac.T).tril(-1)
                dbc = dbc + (da * (kc @ kc.T)).sum(1)
                g = r(bc[:, None] * da)
                dk[b, h, rows(c)] = dkc + g @ kc + g.T @ kc
                dbeta[b, h, rows(c)] = dbc
    return dq, dk, dv, dbeta


def forward(q, k, v, beta, h0):
    """The forward's saved tensors from the initial state h0 [B, H, K, V]: the reference's a_inv,
    w and u (the state does not enter them) and the boundary states of the chunked recurrence."""
    _, _, a_inv, _, w, u = deltanet_chunk_forward(q, k, v, beta, chunk_size=C)
    states = [h0]
    for c in range(q.shape[2] // C):
        rows = slice(c * C, (c + 1) * C)
        s = states[-1]
        states.append(s + k[:, :, rows].transpose(2, 3) @ (u[:, :, rows] - w[:, :, rows] @ s))
    return torch.stack(states, dim=2), a_inv, w, u


@pytest.mark.parametrize("B, H, L, D, init", [(1, 2, 192, 16, False), (2, 1, 128, 32, True)])
def test_the_programs_arithmetic_is_the_reference_backward(rng, B, H, L, D, init):
    q, k, v, beta = inputs(rng, B, H, L, D)
    do = torch.randn(B, H, L, D, generator=rng, dtype=F64)
    h0 = torch.randn(B, H, D, D, generator=rng, dtype=F64) * 0.3 if init else torch.zeros(B, H, D, D, dtype=F64)
    S, a_inv, w, u = forward(q, k, v, beta, h0)
    ours = model(do, q, k, v, beta, S, a_inv, w, u)
    ref = deltanet_chunk_backward(do, q, k, v, beta, S, chunk_size=C)
    for name, a, b in zip(("dq", "dk", "dv", "dbeta"), ours, ref):
        assert relative(a, b) <= 1e-12, name
    # and against autograd through the token-by-token recurrence
    leaves = [x.clone().requires_grad_() for x in (q, k, v, beta)]
    o, _ = recurrent_delta_rule(*(x.transpose(1, 2) for x in leaves), scale=1.0, initial_state=h0)
    autograd = torch.autograd.grad(o, leaves, do.transpose(1, 2))
    for name, a, b in zip(("dq", "dk", "dv", "dbeta"), ours, autograd):
        assert relative(a, b) <= 1e-12, name


@pytest.mark.parametrize("dtype, bound", [(torch.bfloat16, 2e-2), (torch.float16, 5e-3)])
def test_its_16_bit_operands_stay_within_the_gpu_tests_tolerance(rng, dtype, bound):
    # The GPU tests' bounds (tests/kernels/deltanet/test_deltanet_chunk_bwd_gpu.py) hold for the
    # programs' roundings at D = 128 over 8 chunks, with room to spare; the saved tensors and do
    # come in 16 bits, as the forward hands them over.
    q, k, v, beta = inputs(rng, 1, 2, 512, 128, dtype)
    do = torch.randn(1, 2, 512, 128, generator=rng, dtype=F64).to(dtype).to(F64)
    S, a_inv, w, u = forward(q, k, v, beta, torch.zeros(1, 2, 128, 128, dtype=F64))
    a_inv, w, u = (x.to(dtype).to(F64) for x in (a_inv, w, u))
    exact = deltanet_chunk_backward(do, q, k, v, beta, S, chunk_size=C)
    rounded = model(do, q, k, v, beta, S, a_inv, w, u, rounded=dtype)
    errors = [relative(a, b) for a, b in zip(rounded, exact)]
    assert max(errors) <= bound / 2, errors

"""GLA's chunked training forward as tl.gla_chunk_fwd runs it, in float64: the per-channel prefill's
two passes (``tests/kernels/kda/prefill_model``), its chain storing the state entering every
64-token chunk and the final one, against the reference's (o, final_state, h)."""

from __future__ import annotations

import pytest
import torch

from tileops.reference.gla.chunk import chunk_gla
from tests.kernels.kda.prefill_model import C, F64, first_pass, walk
from tests.kernels.kda.test_kda_prefill_model import GATES, gates, relative


@pytest.mark.parametrize("kind", GATES)
@pytest.mark.parametrize("with_state", [True, False], ids=["initial-state", "zeros"])
def test_the_boundary_states_are_the_references_h(kind, with_state):
    gen = torch.Generator().manual_seed(4)
    B, T, H, D, scale = 2, 3 * C, 2, 32, 0.3
    q = torch.randn(B, T, H, D, generator=gen, dtype=F64)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, D, generator=gen, dtype=F64), dim=-1)
    v = torch.randn(B, T, H, D, generator=gen, dtype=F64)
    g = gates(kind, (B, T, H, D), gen)
    h0 = torch.randn(B, H, D, D, generator=gen, dtype=F64) if with_state else None
    bounds = [n * T for n in range(B + 1)]
    flat = [x.reshape(B * T, H, D) for x in (q, k, v, g)]
    first = first_pass(flat[0], flat[1], flat[3], None, bounds, scale=scale)
    o = torch.zeros(B * T, H, D, dtype=F64)
    h = torch.zeros(B, T // C + 1, H, D, D, dtype=F64)
    for n in range(B):
        state = torch.zeros(H, D, D, dtype=F64) if h0 is None else h0[n]
        for c in range(T // C):  # the chain stores the state entering each window, then walks it
            h[n, c] = state
            bos = bounds[n] + c * C
            state = walk(first, flat[2], bos, bos + C, state, o, sequence_end=n if c == T // C - 1 else None)
        h[n, T // C] = state
    ref_o, ref_final, ref_h = chunk_gla(q, k, v, g, scale=scale, initial_state=h0, chunk_size=C)
    assert relative(o.reshape(B, T, H, D), ref_o) <= 1e-12
    assert relative(h[:, -1], ref_final) <= 1e-12
    assert relative(h, ref_h) <= 1e-12

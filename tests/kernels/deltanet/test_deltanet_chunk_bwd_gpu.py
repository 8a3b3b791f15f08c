"""DeltaNetChunkBwdOp on a CUDA device through dispatch, against the float64 reference: (dq, dk, dv,
dbeta) from what tl.deltanet_chunk_fwd saved, for both widths and token dtypes, betas in fp32 or
the token dtype, from a zero or a given initial state (the op's S[:, :, 0]); a length that is not
a whole number of chunks goes to the reference."""

from __future__ import annotations

import pytest
import torch

from tileops import dispatch
from tileops.linear_attention import BUILTIN, DeltaNetChunkBwdOp, DeltaNetChunkFwdOp
from tileops.tuner.gate import in_float64, relative_error
from tests.kernels.deltanet.test_deltanet_chunk_fwd_gpu import inputs

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 5e-3}  # model of the roundings: test_deltanet_chunk_bwd_model
NAMES = ("dq", "dk", "dv", "dbeta")
C = 64

CASES = [  # B, H, S, D, token dtype, beta dtype, initial state
    (2, 4, 256, 128, torch.bfloat16, torch.float32, False),
    (1, 2, 640, 64, torch.float16, torch.float16, True),
    (4, 16, 512, 128, torch.bfloat16, torch.bfloat16, True),
    (3, 3, 64, 64, torch.bfloat16, torch.float32, False),
    (1, 1, 2048, 128, torch.float16, torch.float32, False),
]


def saved(q, k, v, beta, seed, initial):
    """The forward's saved tensors from tl.deltanet_chunk_fwd; with ``initial``, S recomputed in fp32
    from a random initial state (the states are the only saved tensor it changes)."""
    op = DeltaNetChunkFwdOp(target=BUILTIN)
    assert dispatch.explain(op, q, k, v, beta).kernel == "tl.deltanet_chunk_fwd"
    _, S, Aw, Au, w, u = op(q, k, v, beta)
    if initial:
        gen = torch.Generator(device="cuda").manual_seed(seed + 1)
        s = 0.3 * torch.randn(S[:, :, 0].shape, generator=gen, device="cuda", dtype=torch.float64)
        states = [s]
        for c in range(q.shape[2] // C):
            rows = slice(c * C, (c + 1) * C)
            s = s + k[:, :, rows].double().transpose(2, 3) @ (u[:, :, rows].double() - w[:, :, rows].double() @ s)
            states.append(s)
        S = torch.stack(states, dim=2).float()
    return S, Aw, Au, w, u


@pytest.mark.parametrize("B, H, L, D, dtype, beta_dtype, initial", CASES, ids=lambda x: str(x).replace("torch.", ""))
def test_matches_the_float64_reference(B, H, L, D, dtype, beta_dtype, initial):
    seed = torch.randint(0, 1 << 30, ()).item()
    q, k, v, beta = inputs(B, H, L, D, dtype, beta_dtype, seed)
    do = torch.randn(B, H, L, D, device="cuda", dtype=torch.float32).to(dtype)
    args = (do, q, k, v, beta, *saved(q, k, v, beta, seed, initial))
    op = DeltaNetChunkBwdOp(target=BUILTIN)
    assert dispatch.explain(op, *args).kernel == "tl.deltanet_chunk_bwd"
    ours = op(*args)
    ref = DeltaNetChunkBwdOp(target="reference")(*in_float64(args))
    for name, grad, want, like in zip(NAMES, ours, ref, (q, k, v, beta)):
        assert grad.shape == like.shape and grad.dtype == like.dtype, name
        error = relative_error(grad, want)
        print(f"relative error: chunk_bwd {name} {str(dtype)[6:]} D{D}: {error:.2e}")  # shown by pytest -s
        assert error < TOLERANCE[dtype], (name, seed, error)


def test_a_cut_last_chunk_falls_back_to_the_reference():
    q, k, v, beta = inputs(1, 2, 300, 64, torch.bfloat16, torch.float32, seed=5)
    fwd = DeltaNetChunkFwdOp()(q, k, v, beta)
    args = (torch.randn_like(v), q, k, v, beta, *fwd[1:])
    explanation = dispatch.explain(DeltaNetChunkBwdOp(), *args)
    assert explanation.kernel != "tl.deltanet_chunk_bwd"
    assert any("whole number of 64-token chunks" in note for note in explanation.notes)
    grads = DeltaNetChunkBwdOp()(*args)
    ref = DeltaNetChunkBwdOp(target="reference")(*in_float64(args))
    for grad, want in zip(grads, ref):
        assert relative_error(grad, want) < TOLERANCE[torch.bfloat16]


def test_training_through_the_chunked_forward_runs_the_backward_kernel():
    """Autograd through DeltaNetChunkFwdOp on the GPU takes its gradient from tl.deltanet_chunk_bwd
    (no reference recompute, so no fallback warning) and matches the float64 reference."""
    import warnings

    from tileops.errors import ReferenceFallbackWarning

    q, k, v, beta = inputs(2, 4, 512, 128, torch.bfloat16, torch.float32, seed=7)
    do = torch.randn_like(v)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, beta)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReferenceFallbackWarning)
        o = DeltaNetChunkFwdOp()(*leaves)[0]
        o.backward(do)
    want = [x.double().requires_grad_() for x in (q, k, v, beta)]
    DeltaNetChunkFwdOp(target="reference")(*want)[0].backward(do.double())
    for name, got, ref in zip(NAMES, leaves, want):
        assert relative_error(got.grad, ref.grad) < TOLERANCE[torch.bfloat16], name

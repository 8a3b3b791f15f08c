"""DeltaNetChunkFwdOp on a CUDA device through dispatch, against the float64 reference: all six
outputs (o, the boundary states S, Aw, Au, w, u) for both widths and token dtypes, betas in fp32
or the token dtype; a length that is not a whole number of chunks goes to the reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tileops import dispatch
from tileops.linear_attention import BUILTIN, DeltaNetChunkFwdOp
from tileops.tuner.gate import in_float64, relative_error

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

TOLERANCE = {torch.bfloat16: 1.5e-2, torch.float16: 4e-3}  # model of the roundings: test_deltanet_chunk_fwd_model
NAMES = ("o", "S", "Aw", "Au", "w", "u")


def inputs(B, H, L, D, dtype, beta_dtype, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, H, L, D, generator=gen, device="cuda").to(dtype)
    k = F.normalize(torch.randn(B, H, L, D, generator=gen, device="cuda"), dim=-1).to(dtype)
    v = torch.randn(B, H, L, D, generator=gen, device="cuda").to(dtype)
    beta = (torch.rand(B, H, L, generator=gen, device="cuda") * 0.9 + 0.05).to(beta_dtype)
    return q, k, v, beta


CASES = [  # B, H, S, D, token dtype, beta dtype
    (2, 4, 256, 128, torch.bfloat16, torch.float32),
    (1, 2, 640, 64, torch.float16, torch.float16),
    (4, 16, 512, 128, torch.bfloat16, torch.bfloat16),
    (3, 3, 64, 64, torch.bfloat16, torch.float32),
]


@pytest.mark.parametrize("B, H, L, D, dtype, beta_dtype", CASES, ids=lambda x: str(x).replace("torch.", ""))
def test_matches_the_float64_reference(B, H, L, D, dtype, beta_dtype):
    seed = torch.randint(0, 1 << 30, ()).item()
    args = inputs(B, H, L, D, dtype, beta_dtype, seed)
    op = DeltaNetChunkFwdOp(target=BUILTIN)
    assert dispatch.explain(op, *args).kernel == "tl.deltanet_chunk_fwd"
    ours = op(*args)
    ref = DeltaNetChunkFwdOp(target="reference")(*in_float64(args))
    for name, out, want in zip(NAMES, ours, ref):
        assert out.shape == want.shape, name
        assert out.dtype == (torch.float32 if name == "S" else dtype), name
        error = relative_error(out, want)
        print(f"relative error: chunk_fwd {name} {str(dtype)[6:]} D{D}: {error:.2e}")  # shown by pytest -s
        assert error < TOLERANCE[dtype], (name, seed, error)


def test_a_cut_last_chunk_falls_back_to_the_reference():
    args = inputs(1, 2, 300, 64, torch.bfloat16, torch.float32, seed=5)
    explanation = dispatch.explain(DeltaNetChunkFwdOp(), *args)
    assert explanation.kernel != "tl.deltanet_chunk_fwd"
    assert any("whole number of 64-token chunks" in note for note in explanation.notes)
    o = DeltaNetChunkFwdOp()(*args)[0]
    ref = DeltaNetChunkFwdOp(target="reference")(*in_float64(args))[0]
    assert relative_error(o, ref) < TOLERANCE[torch.bfloat16]

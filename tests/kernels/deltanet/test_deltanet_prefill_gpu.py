"""DeltaNetFwdOp's prefill on a CUDA device through dispatch, against the float64 reference: both
widths and token dtypes, grouped value heads, ``scale`` and the in-kernel L2 norm, with and
without an initial state, equal lengths and packed ones (a one-token sequence, lengths that are
not multiples of 64, 1,000 short sequences), and few long sequences cut into pieces whose entry
states come from the exact schedule (no gate: a warm-up would never end)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tileops import dispatch
from tileops.cases import Case
from tileops.linear_attention import BUILTIN
from tileops.tuner.cases import make_inputs, make_op
from tileops.tuner.gate import in_float64, relative_error

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

TOLERANCE = {"bfloat16": 1.5e-2, "float16": 4e-3}  # o is rounded to its dtype; the state is fp32
_SHORT = tuple(1 + (i * 37) % 90 for i in range(1000))  # 1,000 packed sequences of 1 to 90 tokens

CASES = [
    Case("deltanet", 2, 300, 4, 4, 128, device="cuda"),
    Case("deltanet", 3, 200, 2, 4, 64, "float16", device="cuda"),  # grouped value heads
    Case("deltanet", 2, 257, 4, 4, 128, device="cuda", flags=(("use_qk_l2norm_in_kernel", True), ("scale", 0.3))),
    Case("deltanet", 1, 0, 2, 4, 128, device="cuda", seqlens=(1, 64, 200, 3, 130)),
    Case("deltanet", 1, 0, 4, 4, 64, "float16", device="cuda", seqlens=(77, 1, 640, 129)),
    Case("deltanet", 1, 0, 2, 2, 128, device="cuda", seqlens=_SHORT),
    Case("deltanet", 34, 8200, 2, 4, 64, device="cuda"),  # 136 walks of 129 chunks: walked whole, fused
    # Few long sequences: cut into pieces, every piece after a sequence's first from its exact entry.
    Case("deltanet", 1, 32768, 4, 4, 128, device="cuda"),
    Case("deltanet", 2, 9000, 2, 4, 64, "float16", device="cuda"),
    Case("deltanet", 1, 0, 2, 2, 128, device="cuda", seqlens=(20000, 1, 5000, 700)),
]


def run(case: Case, with_state: bool):
    """Ours and the float64 reference on the same fresh inputs; which kernel served ours."""
    if case.seqlens:
        case = replace(case, tokens=sum(case.seqlens))
    seed = torch.randint(0, 1 << 30, ()).item()
    args = list(make_inputs(case, seed))
    if not with_state:
        args[4] = None  # initial_state
    op = make_op(case, target=BUILTIN)
    kernel = dispatch.explain(op, *args).kernel
    ours = op(*args)
    ref = make_op(case, target="reference")(*in_float64(tuple(args)))
    return kernel, ours, ref, seed


@pytest.mark.parametrize("with_state", [True, False], ids=["state", "nostate"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label.replace(" ", "-"))
def test_prefill_matches_the_float64_reference(case, with_state):
    kernel, (o, state), (ref_o, ref_state), seed = run(case, with_state)
    assert kernel == "tl.deltanet_prefill"
    assert o.dtype == getattr(torch, case.dtype) and state.dtype == torch.float32
    print(f"relative error: prefill {case.label} {'state' if with_state else 'zeros'}: o {relative_error(o, ref_o):.2e}, "
          f"state {relative_error(state, ref_state):.2e}")  # shown by pytest -s
    assert relative_error(o, ref_o) < TOLERANCE[case.dtype], seed
    assert relative_error(state, ref_state) < TOLERANCE[case.dtype], seed


LONG = Case("deltanet", 1, 32768, 16, 16, 128, device="cuda")  # the benchmark's few-long row
GRAPHED = Case("deltanet", 1, 8192, 4, 4, 128, device="cuda")  # cut: summaries, entries, walk


def test_a_long_sequence_is_cut_and_its_pieces_start_exact():
    case = LONG
    op, args = make_op(case), make_inputs(case, seed=3)
    explanation = dispatch.explain(op, *args)
    assert explanation.kernel == "tl.deltanet_prefill" and explanation.config["piece_chunks"]
    assert "exact entry state" in str(explanation)
    o, state = op(*args)
    ref_o, ref_state = make_op(case, target="reference")(*in_float64(args))
    assert relative_error(o, ref_o) < TOLERANCE["bfloat16"] and relative_error(state, ref_state) < 1e-2


def test_prefill_replays_in_a_cuda_graph():
    case = GRAPHED
    op = make_op(case)
    static = make_inputs(case, seed=1)
    op(*static)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_o, out_state = op(*static)
    fresh = make_inputs(case, seed=2)
    for buffer, value in zip(static, fresh):
        if isinstance(buffer, torch.Tensor):
            buffer.copy_(value)
    graph.replay()
    torch.cuda.synchronize()
    eager_o, eager_state = op(*fresh)
    assert torch.equal(out_o, eager_o) and torch.equal(out_state, eager_state)

"""Times a peer library (FLA or the published TileOPs) on benchmark rows, in its own process.

Run from outside the project root with the peer on PYTHONPATH; the project root is appended to
sys.path only to reuse the timing protocol. Prints one JSON object per row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

import torch
import torch.nn.functional as F

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tileops.tuner.timing import time_cuda  # noqa: E402


def inputs(case: dict) -> dict:
    """Random GDN inputs for a row (same distribution as ours)."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    seqlens = case["seqlens"]
    b, t = (1, sum(seqlens)) if seqlens else (case["batch"], case["tokens"])
    n = len(seqlens) if seqlens else b
    h, hv, d = case["heads"], case["value_heads"], case["dim"]
    dt = torch.bfloat16
    q = torch.randn(b, t, h, d, device="cuda", generator=gen).to(dt)
    k = F.normalize(torch.randn(b, t, h, d, device="cuda", generator=gen), dim=-1).to(dt)
    v = torch.randn(b, t, hv, d, device="cuda", generator=gen).to(dt)
    g = (F.logsigmoid(torch.randn(b, t, hv, device="cuda", generator=gen)) / 8)
    beta = torch.rand(b, t, hv, device="cuda", generator=gen) * 0.9 + 0.05
    state = 0.1 * torch.randn(n, hv, d, d, device="cuda", generator=gen)
    cu = None
    if seqlens:
        cu = torch.tensor([0] + seqlens, device="cuda").cumsum(0).to(torch.int32)
    return dict(q=q, k=k, v=v, g=g, beta=beta, state=state, cu=cu)


def runner(peer: str, case: dict):
    """A zero-argument callable running the peer's GDN forward on the row."""
    x = inputs(case)
    if peer == "fla":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule

        fn = fused_recurrent_gated_delta_rule if case["tokens"] == 1 and not case["seqlens"] else chunk_gated_delta_rule
        cu = None if x["cu"] is None else x["cu"].long()
        return lambda: fn(x["q"], x["k"], x["v"], g=x["g"], beta=x["beta"], initial_state=x["state"],
                          output_final_state=True, cu_seqlens=cu)
    from tileops.linear_attention import GDNFwdOp

    op = GDNFwdOp()
    x["g"], x["beta"] = x["g"].to(x["q"].dtype), x["beta"].to(x["q"].dtype)  # it takes them in the token dtype
    cu = None if x["cu"] is None else x["cu"].long()  # TileOPs 0.1.0 takes int64 offsets only
    cu_cpu = None if cu is None else cu.cpu()
    return lambda: op(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"], cu, cu_cpu)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--peer", choices=("fla", "tileops"), required=True)
    parser.add_argument("--cases", required=True, help="JSON list of rows")
    args = parser.parse_args()
    for case in json.loads(args.cases):
        try:
            fn = runner(args.peer, case)
            fn()
            torch.cuda.synchronize()
            ms = time_cuda(fn).median_ms
            print(json.dumps({"label": case["label"], "peer": args.peer, "ms": ms}), flush=True)
        except Exception as err:  # a peer that cannot run a row leaves a gap, not a crash
            print(json.dumps({"label": case["label"], "peer": args.peer, "ms": None,
                              "error": f"{type(err).__name__}: {err}"[:300]}), flush=True)
            traceback.print_exc(file=sys.stderr)


if __name__ == "__main__":
    main()

"""Device script for cut sequences: the warm-up walks against the exact schedule, under each gate kind.

    python bench/studies/exact_pieces.py --compile      # fill TileLang's cache (works without a GPU)
    python bench/studies/exact_pieces.py [--rows B1 B4]  # on the GPU: errors, then a table of ms

For each row (bf16, K = V = 128) and each gate kind of ``tileops.cases.GATE_KINDS``: the error of
o and the final state against the float64 reference, then the median ms of the warm-up walks
however far they reach (the schedule before the exact one), of the shipped schedule (warm-ups
within ``WARM_REACH`` chunks, exact entries beyond) and of the exact schedule on every piece, at
each piece width; the exact schedule's launches timed apart (summaries and entries, walk).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tileops.callspec import CallSpec, make_flags  # noqa: E402
from tileops.cases import GATE_KINDS, log_decays  # noqa: E402
from tileops.kernels.prefill_kernel import fused_config  # noqa: E402

ROWS = {"B1": (1, 32768, 16, 32, (128,)), "B4": (4, 8192, 16, 16, (64,)), "B2": (2, 16384, 16, 32, (128,))}


def spec_of(batch, tokens, heads, value_heads, device):
    return CallSpec(op="gdn", entry="GDNFwdOp", mode="prefill", dtype=torch.bfloat16, device=device, arch="sm90",
                    device_name="NVIDIA H200", batch=batch, tokens=tokens, heads=heads, value_heads=value_heads,
                    dim_k=128, dim_v=128, flags=make_flags(scale=128 ** -0.5))


def launchers(spec, widths):
    """Per piece width: the shipped schedule (warm-ups within WARM_REACH chunks), warm-ups however
    far they reach (the schedule before the exact one), and the exact schedule on every piece, its
    summaries over the spans ``plans.pieces.summary_span`` picks and, where that is shorter than a
    piece, over whole pieces too (``exact{w}w``)."""
    import tileops.kernels.launch.chunked_programs as programs
    from tileops.kernels.launch.chunked import PrefillLauncher

    out = {}
    for w in widths:
        config = fused_config(128, walk_moves="tma-output", stages=3, piece_chunks=w)
        for label, reach in (("shipped", programs.WARM_REACH), ("warm", 1 << 20), ("exact", 0)):
            shipped, programs.WARM_REACH = programs.WARM_REACH, reach
            try:
                out[f"{label}{w}"] = PrefillLauncher(config, spec)
            finally:
                programs.WARM_REACH = shipped
        exact = out[f"exact{w}"]
        lengths = (spec.tokens,) * spec.batch
        if exact.summary_span(lengths) < w:
            whole = PrefillLauncher(config, spec)
            whole.warm_start = exact.warm_start  # the exact schedule's: it walks no warm-up
            whole.summary_span = lambda lengths, w=w: w
            out[f"exact{w}w"] = whole
    return out


def inputs(batch, tokens, heads, value_heads, gates, seed=1):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(shape):
        return torch.randn(*shape, generator=gen, device="cuda")

    def rand(shape):
        return torch.rand(*shape, generator=gen, device="cuda")
    q = randn((batch, tokens, heads, 128)).bfloat16()
    k = F.normalize(randn((batch, tokens, heads, 128)), dim=-1).bfloat16()
    v = randn((batch, tokens, value_heads, 128)).bfloat16()
    g = log_decays(gates, (batch, tokens, value_heads), randn, rand, 8.0)
    beta = rand((batch, tokens, value_heads)) * 0.9 + 0.05
    h0 = 0.1 * randn((batch, value_heads, 128, 128))
    return q, k, v, g, beta, h0


def error(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--rows", nargs="*", default=["B1", "B4"])
    parser.add_argument("--gates", nargs="*", default=list(GATE_KINDS))
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    results = []
    for name in args.rows:
        batch, tokens, heads, value_heads, widths = ROWS[name]
        spec = spec_of(batch, tokens, heads, value_heads, device)
        built = launchers(spec, widths)
        if args.compile:
            continue
        from tileops.linear_attention import GDNFwdOp
        from tileops.tuner.timing import time_cuda

        reference = GDNFwdOp(scale=128 ** -0.5, target="reference")
        for gates in args.gates:
            q, k, v, g, beta, h0 = inputs(batch, tokens, heads, value_heads, gates)
            ro, rh = reference(*(x.double() for x in (q, k, v, g, beta, h0)))
            for label, launch in built.items():
                o, ht = launch(q, k, v, g, beta, h0)
                torch.cuda.synchronize()
                row = dict(row=name, gates=gates, config=label, o_err=error(o, ro), state_err=error(ht, rh),
                           ms=time_cuda(lambda: launch(q, k, v, g, beta, h0)).median_ms)
                if label.startswith("exact"):
                    from tileops.kernels.plans.pieces import plan_for
                    plan = plan_for(launch.config.piece_chunks, 64, value_heads, batch, tokens, None, None, device)
                    flat = (q.reshape(-1, heads, 128), k.reshape(-1, heads, 128), v.reshape(-1, value_heads, 128),
                            g.reshape(-1, value_heads), beta.reshape(-1, value_heads), *([launch.no_gate(device)] * 2))
                    begin, rows = launch.warm_starts(plan, flat, 1, batch)
                    row["entries_ms"] = time_cuda(lambda: launch.exact_entries(plan, flat, h0, rows)).median_ms
                    entries = launch.exact_entries(plan, flat, h0, rows)
                    o_flat = torch.empty_like(v).view(-1, value_heads, 128)
                    final = torch.empty_like(h0)
                    row["walk_ms"] = time_cuda(lambda: launch.walk_pieces(plan, flat, entries, begin, rows,
                                                                          o_flat, final)).median_ms
                results.append(row)
                print(json.dumps(row), flush=True)
    if results:
        print(f"\n{'row':4} {'gates':10} {'config':9} {'ms':>7} {'entries':>8} {'walk':>7} {'o err':>9} {'S err':>9}")
        for r in results:
            print(f"{r['row']:4} {r['gates']:10} {r['config']:9} {r['ms']:7.4f} {r.get('entries_ms', 0):8.4f} "
                  f"{r.get('walk_ms', 0):7.4f} {r['o_err']:9.2e} {r['state_err']:9.2e}")


if __name__ == "__main__":
    main()

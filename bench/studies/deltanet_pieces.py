"""Device script for DeltaNet's few long sequences: the exact schedule's piece width, and two passes.

    python bench/studies/deltanet_pieces.py --compile   # fill TileLang's cache (works without a GPU)
    python bench/studies/deltanet_pieces.py             # on the GPU: errors, then a table of ms
    python bench/studies/deltanet_pieces.py --tiles 0 64 [--compile]   # summary tiles and layouts
    ncu -k regex:"summary|fused" --launch-count 2 --section WarpStateStats --section SourceCounters -o rep \
        python bench/studies/deltanet_pieces.py --rows B4 --widths 64 --two-pass --profile   # see fused_stalls.py

For B1×T32768 and B4×T8192 at H16 (bf16, K = V = 128, the issue's rows) and each piece width:
the error of o and the final state against the float64 reference, the median ms of the call,
and its launches apart (summaries and entries, then the walk). Without a gate every piece after
a sequence's first takes its exact entry; a width as long as the sequence walks it whole. The
two-pass chains (``TWO_PASS``) walk every sequence whole on V tiles instead, no entries needed.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tileops.callspec import CallSpec, make_flags  # noqa: E402
from tileops.kernels.prefill_kernel import PrefillConfig, fused_config  # noqa: E402
from tileops.kernels.plans.pieces import PIECE_WIDTHS  # noqa: E402

ROWS = {"B1": (1, 32768, 16), "B4": (4, 8192, 16)}
TWO_PASS = {"value64s1": dict(state_major="value", block_v=64, threads=128, num_stages=1),
            "value64s2": dict(state_major="value", block_v=64, threads=128, num_stages=2),
            "key32s2": dict(state_major="key", block_v=32, threads=256, num_stages=2)}


def spec_of(batch, tokens, heads, device, state_v_first=False):
    return CallSpec(op="deltanet", entry="DeltaNetFwdOp", mode="prefill", dtype=torch.bfloat16, device=device,
                    arch="sm90", device_name="NVIDIA H200", batch=batch, tokens=tokens, heads=heads,
                    value_heads=heads, dim_k=128, dim_v=128,
                    flags=make_flags(scale=128 ** -0.5, use_qk_l2norm_in_kernel=False, has_initial_state=True,
                                     state_v_first=state_v_first))


def inputs(batch, tokens, heads, seed=1):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(shape):
        return torch.randn(*shape, generator=gen, device="cuda")
    q = randn((batch, tokens, heads, 128)).bfloat16()
    k = F.normalize(randn((batch, tokens, heads, 128)), dim=-1).bfloat16()
    v = randn((batch, tokens, heads, 128)).bfloat16()
    beta = torch.rand((batch, tokens, heads), generator=gen, device="cuda") * 0.9 + 0.05
    h0 = 0.1 * randn((batch, heads, 128, 128))
    return q, k, v, beta, h0


def flat_inputs(launch, q, k, v, beta):
    """What the launcher's programs read of an ungated call (``PrefillLauncher``'s inputs): q, k, v
    and β per token, β standing in for the gate, and zeros for A_log and dt_bias."""
    heads = q.shape[2]
    beta = beta.reshape(-1, heads)
    none = launch.no_gate(q.device)
    return q.reshape(-1, heads, 128), k.reshape(-1, heads, 128), v.reshape(-1, heads, 128), beta, beta, none, none


def error(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def summary_tiles(args, device) -> None:
    """``--tiles``: 64-chunk pieces with summaries on all 128 value rows a CTA or on 64 (two CTAs to
    an SM where they take more than a wave), the state key- or value-major (the entries kernel reads
    the transitions along rows in the one and down columns in the other): ms of the call, of the
    summaries with the entries, of the entries alone (timing only: they chain unwritten summaries)
    and of the walk."""
    from tileops.kernels.launch.chunked import PrefillLauncher
    from tileops.kernels.launch.chunked_programs import compile_summary
    from tileops.kernels.plans.pieces import plan_for
    from tileops.tuner.timing import time_cuda

    if not args.compile:
        print(f"{'row':4} {'layout':>6} {'tile':>4} {'call':>7} {'summ+ent':>8} {'entries':>7} {'walk':>7}  (ms)")
    for name in args.rows:
        batch, tokens, heads = ROWS[name]
        for v_first in (False, True):
            spec = spec_of(batch, tokens, heads, device, state_v_first=v_first)
            config = fused_config(128, walk_moves="tma-output", stages=3, piece_chunks=64)
            base = PrefillLauncher(config, spec, gated=False)
            for tile in args.tiles:
                launch = copy.copy(base)
                launch.summary = compile_summary(config, spec, gated=False, value_tile=tile)
                if args.compile:
                    continue
                q, k, v, beta, h0 = inputs(batch, tokens, heads)
                plan = plan_for(64, 64, heads, batch, tokens, None, None, device)
                flat = flat_inputs(launch, q, k, v, beta)
                rows = plan.exact_rows[1]
                alone = copy.copy(launch)
                alone.summary = lambda *_: None
                entries = launch.exact_entries(plan, flat, h0, rows)
                o_flat, final = torch.empty_like(v).view(-1, heads, 128), torch.empty_like(h0)
                ms = [time_cuda(f).median_ms for f in (
                    lambda: launch(q, k, v, None, beta, h0),
                    lambda: launch.exact_entries(plan, flat, h0, rows),
                    lambda: alone.exact_entries(plan, flat, h0, rows),
                    lambda: launch.walk_pieces(plan, flat, entries, plan.starts, rows, o_flat, final))]
                layout = "value" if v_first else "key"
                print(f"{name:4} {layout:>6} {tile:4} {ms[0]:7.4f} {ms[1]:8.4f} {ms[2]:7.4f} {ms[3]:7.4f}", flush=True)


def main() -> None:
    from tileops.kernels.launch.chunked import PrefillLauncher

    parser = argparse.ArgumentParser()
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--profile", action="store_true", help="one call of each build, for Nsight Compute")
    parser.add_argument("--rows", nargs="*", default=list(ROWS))
    parser.add_argument("--widths", nargs="*", type=int, default=list(PIECE_WIDTHS))
    parser.add_argument("--two-pass", nargs="*", default=list(TWO_PASS))
    parser.add_argument("--tiles", nargs="*", type=int, help="summary value tiles to compare (0: all rows)")
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    if args.tiles is not None:
        summary_tiles(args, device)
        return
    results = []
    for name in args.rows:
        batch, tokens, heads = ROWS[name]
        spec = spec_of(batch, tokens, heads, device)
        configs = {w: fused_config(128, walk_moves="tma-output", stages=3, piece_chunks=w) for w in args.widths}
        configs.update({name: PrefillConfig(**fields) for name, fields in TWO_PASS.items() if name in args.two_pass})
        built = {w: PrefillLauncher(config, spec, gated=False) for w, config in configs.items()}
        if args.compile:
            continue
        from tileops.kernels.plans.pieces import plan_for
        from tileops.linear_attention import DeltaNetFwdOp
        from tileops.tuner.timing import time_cuda

        q, k, v, beta, h0 = inputs(batch, tokens, heads)
        if args.profile:
            for launch in built.values():
                launch(q, k, v, None, beta, h0)
            torch.cuda.synchronize()
            continue
        ro, rh = DeltaNetFwdOp(scale=128 ** -0.5, target="reference")(*(x.double() for x in (q, k, v, beta, h0)))
        for width, launch in built.items():
            o, ht = launch(q, k, v, None, beta, h0)
            torch.cuda.synchronize()
            row = dict(row=name, width=width, o_err=error(o, ro), state_err=error(ht, rh),
                       ms=time_cuda(lambda: launch(q, k, v, None, beta, h0)).median_ms)
            plan = plan_for(width, 64, heads, batch, tokens, None, None, device) if launch.fused else None
            if plan is not None and plan.cut:
                flat = flat_inputs(launch, q, k, v, beta)
                begin, rows = plan.starts, plan.exact_rows[1]
                row["entries_ms"] = time_cuda(lambda: launch.exact_entries(plan, flat, h0, rows)).median_ms
                entries = launch.exact_entries(plan, flat, h0, rows)
                o_flat, final = torch.empty_like(v).view(-1, heads, 128), torch.empty_like(h0)
                row["walk_ms"] = time_cuda(lambda: launch.walk_pieces(plan, flat, entries, begin, rows, o_flat,
                                                                      final)).median_ms
            results.append(row)
            print(json.dumps(row), flush=True)
    if results:
        print(f"\n{'row':4} {'width':>9} {'ms':>7} {'entries':>8} {'walk':>7} {'o err':>9} {'S err':>9}")
        for r in results:
            print(f"{r['row']:4} {str(r['width']):>9} {r['ms']:7.4f} {r.get('entries_ms', 0):8.4f} "
                  f"{r.get('walk_ms', 0):7.4f} {r['o_err']:9.2e} {r['state_err']:9.2e}")


if __name__ == "__main__":
    main()

"""Device script: DeltaNet's B4×T8192 H16 prefill through the exact schedule, launch by launch.

    python bench/studies/deltanet_overlap.py --compile   # fill TileLang's cache (no GPU needed)
    python bench/studies/deltanet_overlap.py             # on the GPU: two tables of ms

1. Per walk variant (products waited one by one or in pairs; three or two input stages): the
   summaries of the first 64-chunk pieces, walked by 128 CTAs of 64 value rows (what the launcher
   builds for this call) or by 64 CTAs of all 128, and the walk of the 128 pieces.
2. An unequal cut with the lead pieces walked beside the summaries: per sequence and head the
   lead piece (its first L chunks) walks with outputs on a second stream while the summary of
   those L chunks runs (64 CTAs of all 128 value rows, so that both fit on the SMs at once), then
   the tail piece walks the other 128 − L chunks from it. Timing only: each launch reads inputs
   of its own length.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.studies.deltanet_pieces import flat_inputs, inputs, spec_of  # noqa: E402
from tileops.kernels.prefill_kernel import fused_config  # noqa: E402

BATCH, HEADS, CHUNKS = 4, 16, 128


def main() -> None:
    from tileops.kernels.launch.chunked import PrefillLauncher
    from tileops.kernels.launch.chunked_programs import compile_summary

    parser = argparse.ArgumentParser()
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--leads", nargs="*", type=int, default=[64, 96, 104, 112])
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    spec = spec_of(BATCH, CHUNKS * 64, HEADS, device)
    variants = {}
    for issue in ("serial", "paired"):
        for stages in (3, 2):
            config = fused_config(128, walk_moves="tma-output", walk_issue=issue, stages=stages, piece_chunks=64)
            split = PrefillLauncher(config, spec, gated=False)
            whole = copy.copy(split)
            whole.summary = compile_summary(config, spec, gated=False)
            variants[f"{issue} s{stages}"] = split, whole
    if args.compile:
        return
    from tileops.kernels.plans.pieces import host_plan
    from tileops.tuner.timing import time_cuda

    def flat(tokens):
        q, k, v, beta, h0 = inputs(BATCH, tokens, HEADS)
        return flat_inputs(variants["serial s3"][0], q, k, v, beta), h0

    def summary(chunks, launcher):
        """The summaries of sequences cut in two, the first piece ``chunks`` long: one job each."""
        x, h0 = flat(2 * chunks * 64)
        plan = host_plan((2 * chunks * 64,) * BATCH, chunks, 64, HEADS, device)
        cut = copy.copy(launcher)
        cut.config = launcher.config.model_copy(update={"piece_chunks": chunks})
        return lambda: cut.exact_entries(plan, x, h0, plan.exact_rows[1])

    def walker(chunks, launcher):
        x, h0 = flat(chunks * 64)
        plan = host_plan((chunks * 64,) * BATCH, 128, 64, HEADS, device)
        o, final = torch.empty_like(x[2]), torch.empty_like(h0)
        return lambda: launcher.walk_pieces(plan, x, h0, plan.starts, plan.entry_rows[1], o, final)

    print(f"{'variant':10} {'summaries, 128 CTAs':>19} {'64 CTAs':>8} {'walk':>7}  (ms; 64 chunks each)")
    for name, (split, whole) in variants.items():
        ms = [time_cuda(f).median_ms for f in (summary(64, split), summary(64, whole), walker(64, split))]
        print(f"{name:10} {ms[0]:19.4f} {ms[1]:8.4f} {ms[2]:7.4f}", flush=True)

    split, whole = variants["serial s3"]
    side = torch.cuda.Stream()
    print(f"\n{'lead':>4} {'lead walk':>9} {'summary':>8} {'tail walk':>9} {'serial':>7} {'overlapped':>10}")
    for lead in args.leads:
        lead_walk, entries, tail_walk = walker(lead, whole), summary(lead, whole), walker(CHUNKS - lead, whole)

        def serial():
            entries()
            tail_walk()

        def overlapped():
            fork = torch.cuda.Event()
            fork.record()
            with torch.cuda.stream(side):
                side.wait_event(fork)
                lead_walk()
            entries()
            tail_walk()
            torch.cuda.current_stream().wait_stream(side)

        ms = [time_cuda(f).median_ms for f in (lead_walk, entries, tail_walk, serial, overlapped)]
        print(f"{lead:4} {ms[0]:9.4f} {ms[1]:8.4f} {ms[2]:9.4f} {ms[3]:7.4f} {ms[4]:10.4f}", flush=True)


if __name__ == "__main__":
    main()

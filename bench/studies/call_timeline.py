"""Device script: where one op call's time goes, kernel by kernel.

    python bench/studies/call_timeline.py [--op deltanet] [--rows prefill] [--gates benchmark mamba]
        [--config '{"num_stages": 1}' ...] [--dim 64] [--shapes B1xT8192xH16xHV32 ...] [--brief] [--gate16]
        [--cut-walks 1.45]
    python bench/studies/call_timeline.py --op gdn --dim 64 --config ... --compile  # builds only, no GPU
    ncu -k regex:NAME --launch-skip 1 --launch-count 1 ... python bench/studies/call_timeline.py --op kda --profile

For each benchmark row of the op under each gate kind (ours: dispatch's choice, or each ``--config``
applied to the kernel's default; a training row: dispatch's forward and backward): the call timed
by the tuner's protocol (CUDA events after an L2 flush), the same call replayed from a CUDA graph
(no host work), the host's time to issue it and where the host spends it, and the profiler's
kernels of one flushed call: each one's start after the first and its duration, so that idle gaps
between launches show.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def host_issue_us(call, repeats: int = 30) -> float:
    """Median µs the host spends issuing ``call`` onto an idle stream."""
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(samples)


def host_profile(call, calls: int = 20, top: int = 12) -> str:
    """cProfile of the host's side of ``calls`` calls, the functions that spent most time themselves."""
    import cProfile
    import io
    import pstats

    torch.cuda.synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call()
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def graphed(call):
    """``call`` captured once into a CUDA graph; returns the replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph.replay


def kernel_rows(call) -> list[tuple[str, float, float]]:
    """(kernel, start µs after the first kernel, duration µs) of one call after an L2 flush."""
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    flush.zero_()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    if not kernels:
        return []
    first = kernels[0].time_range.start
    return [(e.name[:60], e.time_range.start - first, e.time_range.elapsed_us()) for e in kernels]


def configured(op, spec, changes: dict):
    """The launcher of the kernel dispatch routes ``op``'s call ``spec`` to, built with that
    kernel's default config for the call changed by ``changes``."""
    from tileops.dispatch.router import route

    kernel = route(type(op).__name__, op.target, spec).kernel
    if kernel is None:
        raise SystemExit(f"no in-tree kernel serves {spec.op} {spec.mode} on {spec.arch}")
    config = kernel.validate_config({**kernel.default(spec).model_dump(), **changes}, spec)
    print(f"{kernel.name}: {config.model_dump()}", flush=True)
    return kernel.build(config, spec)


def main() -> None:
    from tileops.cli.bench import bench_rows
    from tileops.tuner.cases import make_inputs, make_op, spec_for_arch
    from tileops.tuner.presets import explicit_case

    parser = argparse.ArgumentParser()
    parser.add_argument("--op", default="deltanet")
    parser.add_argument("--rows", default="prefill")
    parser.add_argument("--gates", nargs="+", default=["benchmark"], help="Gate kinds, each row timed under each.")
    parser.add_argument("--config", type=json.loads, action="append", default=[],
                        help="JSON of knobs that replace the kernel default's (one op's rows, not a training "
                             "step); repeat to time several configs on the same inputs")
    parser.add_argument("--dim", type=int, help="The rows' state width K = V (default: the preset's).")
    parser.add_argument("--shapes", nargs="+", help="Rows of these shapes (tileops-tune's form, B1xT8192xH16xHV32 "
                                                   "or varlen16xT32768xH16xHV32), bf16, instead of the preset's.")
    parser.add_argument("--compile", action="store_true", help="Only build each row's configs for sm90 (no GPU "
                                                               "needed; a training row: dispatch's forward and "
                                                               "backward), into TileLang's cache.")
    parser.add_argument("--brief", action="store_true", help="Leave out the host's profile.")
    parser.add_argument("--gate16", action="store_true", help="KDA's and GLA's gate in the input dtype (as the "
                                                              "specification has it) instead of fp32.")
    parser.add_argument("--profile", action="store_true", help="Only call the first row twice (compile, then the "
                                                                "call a profiler skips to), and stop.")
    parser.add_argument("--cut-walks", type=float, help="KDA's and GLA's cut model: the walks a cut piece costs "
                                                        "(plans.channel_pieces.WALKS of the op's rule) for this run.")
    args = parser.parse_args()
    if args.cut_walks:
        from tileops.kernels.plans import channel_pieces
        channel_pieces.WALKS[args.op == "kda"] = args.cut_walks
    if args.shapes:
        rows = [explicit_case(args.op, shape, 128, "bfloat16").on("cuda") for shape in args.shapes]
    else:
        rows = bench_rows(args.op, args.rows)
    for case in rows:
        case = replace(case, dim=args.dim) if args.dim else case
        if args.compile:
            for call in case.calls():  # a training row: its forward and its backward, as dispatch picks them
                spec = spec_for_arch(call, "sm90", gate16=args.gate16)
                for changes in (args.config if call.entry is None else []) or [{}]:
                    configured(make_op(call), spec, changes)
            continue
        op = make_op(case)
        for gates in args.gates:
            inputs = make_inputs(case, seed=0, gates=gates, gate16=args.gate16)
            for changes in args.config or [None]:
                if changes:
                    spec, arguments = op.describe(*inputs)
                    launcher = configured(op, spec, changes)
                    call = lambda: launcher(*arguments)  # noqa: E731
                else:
                    call = lambda: op(*inputs)  # noqa: E731
                call()
                if args.profile:
                    call()
                    torch.cuda.synchronize()
                    return
                timeline(case.label, gates, call, args.brief)


def timeline(label: str, gates: str, call, brief: bool) -> None:
    """Print one call's protocol and graph-replay times, its host issue time, its kernels and
    (unless ``brief``) the host's profile."""
    from tileops.tuner.timing import time_cuda

    protocol = time_cuda(call).median_ms
    try:
        replay = f"{time_cuda(graphed(call)).median_ms:.4f} ms"
    except RuntimeError as err:  # a training step whose backward the reference serves syncs the host
        replay = f"not capturable ({str(err).splitlines()[0][:80]})"
    print(f"\n{label} ({gates} gates): protocol {protocol:.4f} ms, CUDA-graph replay {replay}, "
          f"host issue {host_issue_us(call):.1f} µs", flush=True)
    rows = kernel_rows(call)
    busy = sum(d for _, _, d in rows)
    span = rows[-1][1] + rows[-1][2] if rows else 0.0
    for name, start, duration in rows:
        print(f"  {start:9.1f} µs  {duration:9.1f} µs  {name}")
    print(f"  kernels {busy:.1f} µs busy over a {span:.1f} µs span", flush=True)
    if not brief:
        print(host_profile(call), flush=True)


if __name__ == "__main__":
    main()

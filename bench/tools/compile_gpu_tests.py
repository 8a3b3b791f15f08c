"""Compile, for sm90 on a machine without a GPU, the prefill and op-level programs the GPU tests
(GDN's and DeltaNet's, the chunked training forward's) and the DeltaNet benchmark rows build, so that the H200's time goes to running them (TILELANG_CACHE_DIR names the cache).

    python bench/tools/compile_gpu_tests.py [--jobs N] [--ops-only | --gla-chunked | --channel-prefill]

``--gla-chunked``: only GLA's chunked forward and backward, their GPU tests' builds and the H16 training row's.
``--channel-prefill``: only the KDA and GLA prefill GPU tests' builds.

The decode kernels compile in seconds and are left to the GPU machine.
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

ARCH, DEVICE_NAME = "sm90", "NVIDIA H200"


def prefill_jobs() -> list[tuple]:
    """(config, spec) of every launcher the prefill GPU tests make."""
    from tests.kernels.gdn.test_gdn_prefill_gpu import (CASES, LAYOUTS, PIECE_CASES, PIECE_LENGTHS, SPAN_CALLS, SPAN_CASES,
                                                        WIDE_LAYOUTS, WIDE_LENGTHS, call_spec, layout_config)
    from tileops.kernels.prefill_kernel import default, fused_config

    specs = []
    for case in CASES:
        case = dict(case)
        dtype, H, HV, D, lengths = (case.pop(n) for n in ("dtype", "heads", "value_heads", "dim", "lengths"))
        specs.append(call_spec(mode="prefill", dtype=dtype, heads=H, value_heads=HV, dim=D, batch=3,
                               tokens=lengths[0], device_name=DEVICE_NAME, **case))
    specs.append(call_spec(mode="varlen", dtype=torch.bfloat16, heads=2, value_heads=4, dim=64, batch=6,
                           tokens=899, device_name=DEVICE_NAME, use_qk_l2norm_in_kernel=True))
    jobs = [(layout_config(layout, spec), spec) for spec in specs for layout in LAYOUTS]
    wide = call_spec(mode="varlen", dtype=torch.bfloat16, heads=4, value_heads=32, dim=128, batch=len(WIDE_LENGTHS),
                     tokens=sum(WIDE_LENGTHS), device_name=DEVICE_NAME)
    jobs += [(layout_config(layout, wide), wide) for layout in WIDE_LAYOUTS]
    strided = call_spec(mode="prefill", dtype=torch.bfloat16, heads=4, value_heads=32, dim=128, batch=2, tokens=300,
                        device_name=DEVICE_NAME)  # the strided-inputs test
    jobs.append((fused_config(128), strided))
    for case in PIECE_CASES:  # the pieces test: equal lengths, then packed
        case = dict(case)
        dtype, H, HV, D = (case.pop(n) for n in ("dtype", "heads", "value_heads", "dim"))
        for mode, batch, tokens in (("prefill", 2, 2500), ("varlen", len(PIECE_LENGTHS), sum(PIECE_LENGTHS))):
            spec = call_spec(mode=mode, dtype=dtype, heads=H, value_heads=HV, dim=D, batch=batch, tokens=tokens,
                             device_name=DEVICE_NAME, **case)
            jobs.append((fused_config(D, piece_chunks=16), spec))
    for case in SPAN_CASES:  # the spans test: equal lengths, then packed
        case = dict(case)
        dtype, H, HV, D = (case.pop(n) for n in ("dtype", "heads", "value_heads", "dim"))
        for mode, lengths, _ in SPAN_CALLS:
            spec = call_spec(mode=mode, dtype=dtype, heads=H, value_heads=HV, dim=D, batch=len(lengths),
                             tokens=sum(lengths) if mode == "varlen" else lengths[0], device_name=DEVICE_NAME, **case)
            jobs.append((fused_config(D, piece_chunks=32), spec))
    few = call_spec(mode="prefill", dtype=torch.bfloat16, heads=16, value_heads=32, dim=128, batch=1, tokens=32768,
                    device_name=DEVICE_NAME)  # the exact schedule under the default
    jobs.append((default(few), few))
    small = dict(dtype=torch.bfloat16, heads=2, value_heads=4, dim=64, device_name=DEVICE_NAME)
    resets = call_spec(mode="prefill", batch=2, tokens=2500, **small)  # a full reset in every program
    jobs += [(layout_config(layout, resets), resets) for layout in ("default", "value", "fused", "fused-pieces")]
    gate = call_spec(mode="prefill", batch=1, tokens=2500, use_gate_in_kernel=True, **small)  # a huge A_log
    jobs += [(config, gate) for config in (default(gate), fused_config(64), fused_config(64, piece_chunks=16))]
    offsets = call_spec(mode="varlen", batch=3, tokens=1005, **small)  # wrong device offsets
    jobs += [(layout_config(layout, offsets), offsets) for layout in ("default", "key", "value", "fused",
                                                                      "fused-pieces")]
    return jobs


def op_jobs() -> list[tuple]:
    """(kernel, config, spec) that dispatch picks for the op-level GPU tests' prefill calls (GDN's
    and DeltaNet's) and the DeltaNet benchmark rows, the training step's forward and backward
    included (decode kernels compile in seconds on the GPU machine)."""
    from tileops.cases import Case
    from tileops.dispatch.router import route
    from tileops.tuner.cases import spec_for_arch
    from tests.kernels.deltanet import test_deltanet_prefill_gpu as deltanet
    from tests.kernels.gdn.test_gdn_op_gpu import CASES
    from tileops.cli.bench_cases import bench_cases

    cases = list(CASES) + [Case("gdn", 1, 397, 2, 4, 64, device="cuda", seqlens=(1, 64, 200, 3, 129))]
    cases += list(deltanet.CASES) + [deltanet.LONG, deltanet.GRAPHED] + list(bench_cases("deltanet"))
    jobs = []
    for case in cases:
        if case.seqlens:
            case = replace(case, tokens=sum(case.seqlens))
        for call in case.calls():  # a training row: its forward and its backward
            spec = spec_for_arch(call, ARCH, DEVICE_NAME)
            chosen = route(spec.entry, None, spec)
            if chosen.kernel is not None and not chosen.kernel.name.endswith("_decode"):
                jobs.append((chosen.kernel.name, chosen.selection.config, spec))
    return jobs


def chunk_jobs() -> list[tuple]:
    """(kernel, config, spec) of the chunked training ops' GPU tests."""
    from tileops.callspec import CallSpec, make_flags
    from tileops.kernels.deltanet import chunk_bwd, chunk_fwd
    from tests.kernels.deltanet import test_deltanet_chunk_bwd_gpu, test_deltanet_chunk_fwd_gpu

    def job(module, entry, mode, case):
        batch, heads, length, dim, dtype, *_ = case
        spec = CallSpec(op="deltanet", entry=entry, mode=mode, dtype=dtype, device=torch.device("cuda", 0), arch=ARCH,
                        device_name=DEVICE_NAME, batch=batch, tokens=length, heads=heads, value_heads=heads,
                        dim_k=dim, dim_v=dim, flags=make_flags(chunk_size=64))
        return module.KERNEL.name, module.KERNEL.default(spec), spec

    backward_cases = test_deltanet_chunk_bwd_gpu.CASES  # each runs the forward first
    return ([job(chunk_fwd, "DeltaNetChunkFwdOp", "chunk_fwd", c)
             for c in test_deltanet_chunk_fwd_gpu.CASES + backward_cases]
            + [job(chunk_bwd, "DeltaNetChunkBwdOp", "chunk_bwd", c) for c in backward_cases])


def on_gpu(op, *args):
    """The CallSpec of ``op``'s call on CPU tensors ``args`` as the GPU of ARCH would describe it."""
    spec, _ = op.describe(*args)
    return replace(spec, device=torch.device("cuda", 0), arch=ARCH, device_name=DEVICE_NAME)


def gla_chunked_jobs() -> list[tuple]:
    """(kernel, config, spec) of GLAChunkFwdOp's and GLAChunkBwdOp's GPU tests and of their
    B4×T4096 H16 training row."""
    from tileops.kernels.gla import chunk_bwd, chunk_fwd
    from tileops.linear_attention import GLAChunkBwdOp, GLAChunkFwdOp
    from tests.kernels.gla import test_gla_chunk_bwd_gpu, test_gla_chunk_fwd_gpu

    train = [(4, 4096, 16, 128, torch.bfloat16, -1.0, True, torch.float32)]  # the bench draws g in fp32
    jobs = []
    for cases, backward in ((test_gla_chunk_fwd_gpu.CASES, False), (test_gla_chunk_bwd_gpu.CASES, True)):
        shapes = [(c["B"], c["T"], c["H"], c["D"], c["dtype"], c.get("scale", -1.0), c.get("init", True),
                   c.get("gate_dtype") or c["dtype"]) for c in cases]
        for B, T, H, D, dtype, scale, init, gate in shapes + train:
            q, g = torch.zeros(B, T, H, D, dtype=dtype), torch.zeros(B, T, H, D, dtype=gate)
            if backward:
                state = torch.zeros(B, T // 64 + 1, H, D, D)
                spec = on_gpu(GLAChunkBwdOp(scale=scale), q, q, q, g, state, q, None)
                jobs.append((chunk_bwd.KERNEL.name, chunk_bwd.KERNEL.default(spec), spec))
            else:
                h0 = torch.zeros(B, H, D, D) if init else None
                spec = on_gpu(GLAChunkFwdOp(scale=scale), q, q, q, g, h0)
                jobs.append((chunk_fwd.KERNEL.name, chunk_fwd.KERNEL.default(spec), spec))
    return jobs


def channel_prefill_jobs() -> list[tuple]:
    """(kernel, config, spec) of the KDA and GLA prefill GPU tests: each case's inputs drawn on the
    CPU, the op's own describe(), the spec moved to the GPU, dispatch's choice for it."""
    from tileops import dispatch
    from tileops.kernels.registry import get_kernel
    from tileops.linear_attention import GLAFwdOp, KDAFwdOp
    from tests.kernels.gla import test_gla_prefill_gpu as gla
    from tests.kernels.kda import test_kda_prefill_gpu as kda

    calls = []
    for case in kda.FEATURES + kda.CUT:
        case = dict(case)
        case.pop("id")
        dtype, H, HV, D, lengths = (case.pop(n) for n in ("dtype", "H", "HV", "D", "lengths"))
        flags = case.pop("flags", {})
        tensors, h0, cu, a_log, dt_bias = kda.inputs(0, lengths, H, HV, D, dtype, device="cpu", **case)
        calls.append((KDAFwdOp(**flags), (*tensors, h0, cu, cu, a_log, dt_bias)))
    for lengths in ((8191,), (30,) * 1000):  # the thousand short sequences and the long one
        tensors, h0, cu, a_log, dt_bias = kda.inputs(0, lengths, 2, 2, 64, torch.bfloat16, device="cpu")
        calls.append((KDAFwdOp(), (*tensors, h0, cu, cu, a_log, dt_bias)))
    for case in gla.FEATURES + gla.CUT:
        case = dict(case)
        case.pop("id")
        dtype, H, D, lengths = case.pop("dtype"), case.pop("H", 2), case.pop("D"), case.pop("lengths")
        scale = case.pop("scale", None)
        tensors, h0, cu = gla.inputs(0, lengths, H, D, dtype, device="cpu", **case)
        calls.append((GLAFwdOp(scale=scale), (*tensors, h0, cu, cu)))
    jobs = []
    for op, args in calls:
        spec = on_gpu(op, *args)
        chosen = dispatch.explain_spec(type(op).__name__, None, spec)
        kernel = get_kernel(chosen.kernel)
        jobs.append((kernel.name, kernel.validate_config(chosen.config, spec), spec))
    return jobs


def build(job: tuple) -> str:
    from tileops.kernels.registry import get_kernel

    name, config, spec = job
    get_kernel(name).build(config, spec)
    return f"{name} {spec.mode} {spec.dtype} H{spec.heads}/{spec.value_heads} K{spec.dim_k} {config.to_json()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--ops-only", action="store_true", help="only the op-level tests' and benchmark rows' builds")
    parser.add_argument("--gla-chunked", action="store_true", help="only GLA's chunked forward's and backward's builds")
    parser.add_argument("--channel-prefill", action="store_true", help="only the KDA and GLA prefill tests' builds")
    args = parser.parse_args()
    if args.gla_chunked:
        wanted = gla_chunked_jobs()
    elif args.channel_prefill:
        wanted = channel_prefill_jobs()
    else:
        wanted = (([] if args.ops_only else [("tl.gdn_prefill", *job) for job in prefill_jobs()]) + op_jobs()
                  + chunk_jobs())
    jobs, seen = [], set()
    for name, config, spec in wanted:
        key = (name, config.to_json(), spec.program_facts)
        if key not in seen:
            seen.add(key)
            jobs.append((name, config, spec))
    print(f"compiling {len(jobs)} prefill builds for {ARCH}", flush=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        for line in pool.map(build, jobs):
            print("  built", line, flush=True)


if __name__ == "__main__":
    main()

"""Device script: DeltaNet's chunked training forward at B4×T4096 H16 (bf16, K = V = 128), ours
against FLA's chunk_delta_rule forward.

    python bench/studies/deltanet_chunk_fwd.py --compile   # fill TileLang's cache (no GPU needed)
    python bench/studies/deltanet_chunk_fwd.py             # ours: median ms (L2 flushed)
    (cd /tmp && PYTHONPATH=$ANCHORS_PYTHONPATH python3 -P $ROOT/bench/studies/deltanet_chunk_fwd.py --fla)

Ours returns what DeltaNetChunkFwdOp returns (o, the boundary states, Aw, Au, w, u); FLA's forward
returns o and keeps its own states for its backward.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

B, H, L, D = 4, 16, 4096, 128
FLUSH = 256 << 20


def median_ms(fn, repeats=30):
    flush = torch.empty(FLUSH, dtype=torch.uint8, device="cuda")
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def inputs(layout):
    gen = torch.Generator(device="cuda").manual_seed(0)
    shape = (B, H, L, D) if layout == "bhsd" else (B, L, H, D)
    q = torch.randn(*shape, generator=gen, device="cuda").bfloat16()
    k = F.normalize(torch.randn(*shape, generator=gen, device="cuda"), dim=-1).bfloat16()
    v = torch.randn(*shape, generator=gen, device="cuda").bfloat16()
    beta = torch.rand(*shape[:3], generator=gen, device="cuda") * 0.9 + 0.05
    return q, k, v, beta.bfloat16()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--fla", action="store_true")
    args = parser.parse_args()
    if args.fla:
        from fla.ops.delta_rule import chunk_delta_rule

        q, k, v, beta = inputs("bthd")
        ms = median_ms(lambda: chunk_delta_rule(q, k, v, beta, scale=1.0))
        print(f"FLA chunk_delta_rule forward B{B}xT{L} H{H}: {ms:.4f} ms")
        return
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from tileops.callspec import CallSpec, make_flags
    from tileops.kernels.deltanet.chunk_fwd import KERNEL

    device = torch.device("cuda", 0)
    spec = CallSpec(op="deltanet", entry="DeltaNetChunkFwdOp", mode="chunk_fwd", dtype=torch.bfloat16, device=device,
                    arch="sm90", device_name="NVIDIA H200", batch=B, tokens=L, heads=H, value_heads=H, dim_k=D,
                    dim_v=D, flags=make_flags(chunk_size=64))
    configs = {c.to_json(): c for c in [KERNEL.default(spec)] + [
        KERNEL.config_model(block_v=bv, threads=t, num_stages=s)
        for bv, t, s in ((32, 128, 1), (64, 128, 1), (64, 256, 2), (32, 256, 2))]}
    launchers = {name: KERNEL.build(c, spec) for name, c in configs.items()}
    if args.compile:
        return
    q, k, v, beta = inputs("bhsd")
    for name, launch in launchers.items():
        print(f"ours {name}: {median_ms(lambda: launch(q, k, v, beta)):.4f} ms", flush=True)


if __name__ == "__main__":
    main()

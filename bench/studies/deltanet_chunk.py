"""Device script: DeltaNet's chunked training ops at B4×T4096 H16 (bf16, K = V = 128), ours against
FLA's chunk_delta_rule: the forward, the backward and the two together.

    python bench/studies/deltanet_chunk.py --compile   # fill TileLang's cache (no GPU needed)
    python bench/studies/deltanet_chunk.py             # ours: median ms (L2 flushed)
    (cd /tmp && PYTHONPATH=$ANCHORS_PYTHONPATH python3 -P $ROOT/bench/studies/deltanet_chunk.py --fla)

Ours: DeltaNetChunkFwdOp's kernel (o, the boundary states, Aw, Au, w, u) under a few chain
tilings, DeltaNetChunkBwdOp's kernel (dq, dk, dv, dβ from those) under a few walk tilings, and
the two defaults back to back. FLA: chunk_delta_rule's forward alone, and forward plus autograd
backward (its backward recomputes nothing it saved).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

B, H, L, D = 4, 16, 4096, 128
FLUSH = 256 << 20
FWD_TILINGS = ((32, 128, 1), (64, 128, 1), (64, 256, 2), (32, 256, 2))
BWD_TILINGS = ((32, 128, 1), (32, 128, 2), (64, 128, 1))


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


def fla() -> None:
    from fla.ops.delta_rule import chunk_delta_rule

    q, k, v, beta = inputs("bthd")
    print(f"FLA chunk_delta_rule forward B{B}xT{L} H{H}: "
          f"{median_ms(lambda: chunk_delta_rule(q, k, v, beta, scale=1.0)):.4f} ms", flush=True)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, beta)]
    do = torch.randn_like(v)

    def step():
        o, _ = chunk_delta_rule(*leaves, scale=1.0)
        o.backward(do)

    print(f"FLA chunk_delta_rule forward + backward B{B}xT{L} H{H}: {median_ms(step):.4f} ms", flush=True)


def kernels(entry: str, mode: str, module, tilings):
    """(spec, {config json: launcher}) of one kernel: its default first, then ``tilings``."""
    from tileops.callspec import CallSpec, make_flags

    spec = CallSpec(op="deltanet", entry=entry, mode=mode, dtype=torch.bfloat16, device=torch.device("cuda", 0),
                    arch="sm90", device_name="NVIDIA H200", batch=B, tokens=L, heads=H, value_heads=H, dim_k=D,
                    dim_v=D, flags=make_flags(chunk_size=64))
    kernel = module.KERNEL
    configs = {c.to_json(): c for c in [kernel.default(spec)] + [
        kernel.config_model(block_v=bv, threads=t, num_stages=s) for bv, t, s in tilings]}
    return {name: kernel.build(c, spec) for name, c in configs.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--fla", action="store_true")
    args = parser.parse_args()
    if args.fla:
        fla()
        return
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from tileops.kernels.deltanet import chunk_bwd, chunk_fwd

    forwards = kernels("DeltaNetChunkFwdOp", "chunk_fwd", chunk_fwd, FWD_TILINGS)
    backwards = kernels("DeltaNetChunkBwdOp", "chunk_bwd", chunk_bwd, BWD_TILINGS)
    if args.compile:
        return
    q, k, v, beta = inputs("bhsd")
    do = torch.randn_like(v)
    for name, launch in forwards.items():
        print(f"ours forward {name}: {median_ms(lambda: launch(q, k, v, beta)):.4f} ms", flush=True)
    forward = next(iter(forwards.values()))
    saved = forward(q, k, v, beta)[1:]
    for name, launch in backwards.items():
        print(f"ours backward {name}: {median_ms(lambda: launch(do, q, k, v, beta, *saved)):.4f} ms", flush=True)
    backward = next(iter(backwards.values()))
    walk_only = median_ms(lambda: backward.walk(*walk_args(backward, do, q, k, saved)))
    print(f"ours backward walk alone (default): {walk_only:.4f} ms", flush=True)

    def step():
        backward(do, q, k, v, beta, *forward(q, k, v, beta)[1:])

    print(f"ours forward + backward (defaults) B{B}xT{L} H{H}: {median_ms(step):.4f} ms", flush=True)


def walk_args(backward, do, q, k, saved):
    """The backward walk's arguments, as the launcher makes them."""
    n, C = B * H, backward.chunk
    w = saved[3]
    dh = torch.empty(n, L // C, D, D, dtype=q.dtype, device=q.device)
    dv_new = torch.empty(n, L, D, dtype=q.dtype, device=q.device)
    return (q.view(n, L, D), k.view(n, L, D), w.view(n, L, D), do.view(n, L, D), dh, dv_new)


if __name__ == "__main__":
    main()

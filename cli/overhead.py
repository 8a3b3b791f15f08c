"""Host time that dispatch adds to an op call whose key was already looked up, and the host
time of a whole eager call, for a repeated call signature and for a new one (validated in full),
all with a do-nothing launcher."""

from __future__ import annotations

import statistics
import time

import torch

from tileops.dispatch.router import launcher_for
from tileops.linear_attention import GDNFwdOp, register_target, unregister_target


def _median_us(fn, repeats: int = 20000, rounds: int = 7) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        samples.append((time.perf_counter() - start) / repeats * 1e6)
    return statistics.median(samples)


def measure(device: str = "cpu") -> dict[str, float]:
    """µs per call: the dispatch lookup alone, and the full op call around a no-op launcher."""
    b, h, hv, d = 8, 16, 32, 128
    dev = torch.device(device)
    q = torch.randn(b, 1, h, d, device=dev, dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn(b, 1, hv, d, device=dev, dtype=torch.bfloat16)
    g = -torch.rand(b, 1, hv, device=dev)
    beta = torch.rand(b, 1, hv, device=dev)
    outputs = (torch.empty(b, 1, hv, d, device=dev), torch.empty(b, hv, d, d, device=dev))
    register_target("overhead-probe", GDNFwdOp, lambda *args: outputs)
    try:
        op = GDNFwdOp(target="overhead-probe")
        spec, _ = op.describe(q, k, v, g, beta)
        op(q, k, v, g, beta)
        lookup = _median_us(lambda: launcher_for("GDNFwdOp", "overhead-probe", spec))
        call = _median_us(lambda: op(q, k, v, g, beta), repeats=5000)
        describe = _median_us(lambda: op.describe(q, k, v, g, beta), repeats=5000)

        def first_call():
            op._seen.clear()  # as if this signature were new: validated in full
            op(q, k, v, g, beta)

        first = _median_us(first_call, repeats=5000)
    finally:
        unregister_target("overhead-probe", GDNFwdOp)
    return {"dispatch_lookup_us": lookup, "describe_us": describe, "op_call_us": call,
            "op_call_new_signature_us": first}

"""The benchmark rows of `tileops-bench` and the work each one does (FLOPs, bytes)."""

from __future__ import annotations

from tileops.cases import Case
from tileops.tuner.presets import PRESETS

PEAK_TFLOPS = 790.0  # H200 bf16 dense, measured
PEAK_TBPS = 4.3  # H200 copy bandwidth, measured
CHUNK = 64


def bench_cases(op: str) -> tuple[Case, ...]:
    """The rows for one op (the real workloads of its preset)."""
    for preset in PRESETS.values():
        if op in preset and preset is not PRESETS["cpu-small"]:
            return tuple(c.on("cuda") for c in preset[op])
    raise ValueError(f"no benchmark rows for op {op!r}")


# A training step's FLOPs over its forward's: the backward's products are about twice the
# forward's (each forward product has two gradient products), as for a dense layer.
TRAIN_OVER_FORWARD = 3


def flops(case: Case) -> float:
    """Chunked-form FLOPs: per token and value head 6CK + 4CV + 6KV (the WY products, the state
    products and the intra-chunk attention), zero for decode rows; a training step ("train":
    forward then backward) counts TRAIN_OVER_FORWARD times that, 3 × (6CK + 4CV + 6KV)."""
    if case.tokens == 1 and not case.seqlens:
        return 0.0
    tokens = sum(case.seqlens) if case.seqlens else case.batch * case.tokens
    d = case.dim
    forward = tokens * case.value_heads * (6 * CHUNK * d + 4 * CHUNK * d + 6 * d * d)
    return forward * (TRAIN_OVER_FORWARD if case.entry == "train" else 1)


def state_bytes(case: Case) -> float:
    """Bytes a decode step must move: the fp32 state read once and written once."""
    sequences = len(case.seqlens) if case.seqlens else case.batch
    return sequences * case.value_heads * case.dim * case.dim * 4 * 2


def floor_ms(case: Case) -> float:
    """The lower bound on time: compute floor for prefill, bandwidth floor for decode."""
    if flops(case):
        return max(flops(case) / (PEAK_TFLOPS * 1e9), state_bytes(case) / (PEAK_TBPS * 1e9))
    return state_bytes(case) / (PEAK_TBPS * 1e9)

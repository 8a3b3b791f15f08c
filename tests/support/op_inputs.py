"""Random inputs for the linear-attention op tests: seeded, never zeros, small shapes."""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import torch

F64 = torch.float64

OP_NAMES = (
    "DeltaNetChunkFwdOp", "DeltaNetChunkBwdOp", "DeltaNetRecurrentFwdOp", "DeltaNetFwdOp",
    "GDNFwdOp", "KDAFwdOp", "GLAChunkFwdOp", "GLAChunkBwdOp", "GLARecurrentFwdOp", "GLAFwdOp",
)


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """One intra-op thread: the tensors here are tiny, and threads only contend on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(g: torch.Generator, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=F64).to(dtype)


def uniform(g: torch.Generator, *shape: int, lo: float, hi: float, dtype: torch.dtype = F64) -> torch.Tensor:
    return (lo + (hi - lo) * torch.rand(*shape, generator=g, dtype=F64)).to(dtype)


def unit(g: torch.Generator, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    """Random vectors of unit L2 norm along the last dimension."""
    x = randn(g, *shape)
    return (x / x.norm(dim=-1, keepdim=True)).to(dtype)


def log_decay(g: torch.Generator, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    """Log-space decays in (-0.5, -0.01): every token forgets a little."""
    return uniform(g, *shape, lo=-0.5, hi=-0.01, dtype=dtype)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖ in float64."""
    a, b = a.detach().to(F64), b.detach().to(F64)
    assert a.shape == b.shape, f"shape {list(a.shape)} != {list(b.shape)}"
    assert torch.isfinite(a).all(), "non-finite values"
    return ((a - b).norm() / b.norm()).item()


def cu_seqlens_of(lengths: Sequence[int]) -> torch.Tensor:
    offsets = [0]
    for n in lengths:
        offsets.append(offsets[-1] + n)
    return torch.tensor(offsets, dtype=torch.int32)


def delta_rule_tokens(g: torch.Generator, B: int, T: int, H: int, HV: int, K: int, V: int,
                      dtype: torch.dtype = F64, *, normalized: bool = True) -> tuple[torch.Tensor, ...]:
    """q, k [B, T, H, K] and v [B, T, HV, V]. With ``normalized`` k has unit norm (a stable
    recurrence); otherwise q and k are raw Gaussians (for ops that L2-normalise them)."""
    if normalized:
        q, k = unit(g, B, T, H, K, dtype=dtype), unit(g, B, T, H, K, dtype=dtype)
    else:
        q, k = randn(g, B, T, H, K, dtype=dtype), randn(g, B, T, H, K, dtype=dtype)
    return q, k, randn(g, B, T, HV, V, dtype=dtype)


def state(g: torch.Generator, *shape: int, dtype: torch.dtype = F64) -> torch.Tensor:
    return (0.5 * randn(g, *shape)).to(dtype)


def valid_call(name: str, g: torch.Generator, *, B: int = 2, T: int = 5, H: int = 2, K: int = 8,
               V: int = 16, chunk_size: int = 4) -> tuple[dict, dict]:
    """(constructor kwargs, forward kwargs) of a valid float64 CPU call of op ``name``."""
    if name in ("DeltaNetChunkFwdOp", "DeltaNetChunkBwdOp"):
        q, k = unit(g, B, H, T, K), unit(g, B, H, T, K)
        fwd = dict(q=q, k=k, v=randn(g, B, H, T, V), beta=uniform(g, B, H, T, lo=0.1, hi=0.9))
        if name == "DeltaNetChunkFwdOp":
            return dict(chunk_size=chunk_size), fwd
        nc = -(-T // chunk_size)
        return dict(chunk_size=chunk_size), dict(
            do=randn(g, B, H, T, V), **fwd, S=randn(g, B, H, nc + 1, K, V), Aw=randn(g, B, H, T, chunk_size),
            Au=randn(g, B, H, T, chunk_size), w=randn(g, B, H, T, K), u=randn(g, B, H, T, V))
    if name in ("DeltaNetRecurrentFwdOp", "GLARecurrentFwdOp"):
        fwd = dict(q=unit(g, B, H, K), k=unit(g, B, H, K), v=randn(g, B, H, V))
        if name == "DeltaNetRecurrentFwdOp":
            fwd["beta"] = uniform(g, B, H, lo=0.1, hi=0.9)
        else:
            fwd["gk"] = log_decay(g, B, H, K)
        fwd["state"] = state(g, B, H, K, V)
        return {}, fwd
    q, k, v = delta_rule_tokens(g, B, T, H, H, K, V)
    fwd = dict(q=q, k=k, v=v)
    if name == "DeltaNetFwdOp":
        fwd["beta"] = uniform(g, B, T, H, lo=0.1, hi=0.9)
    elif name == "GDNFwdOp":
        fwd.update(g=log_decay(g, B, T, H), beta=uniform(g, B, T, H, lo=0.1, hi=0.9))
    elif name == "KDAFwdOp":
        fwd.update(g=log_decay(g, B, T, H, K), beta=uniform(g, B, T, H, lo=0.1, hi=0.9))
    else:
        fwd["g"] = log_decay(g, B, T, H, K)
    if name == "GLAChunkFwdOp":
        return dict(chunk_size=chunk_size), fwd
    if name == "GLAChunkBwdOp":
        nt = -(-T // chunk_size)
        fwd.update(h=randn(g, B, nt + 1, H, K, V), do=randn(g, B, T, H, V), dht=randn(g, B, H, K, V))
        return dict(chunk_size=chunk_size), fwd
    fwd["initial_state"] = state(g, B, H, K, V)
    return {}, fwd


def gdn_raw_gate(g: torch.Generator, B: int, T: int, HV: int, dtype: torch.dtype = F64) -> tuple[torch.Tensor, ...]:
    """(g_raw [B, T, HV], A_log [HV], dt_bias [HV]) for use_gate_in_kernel."""
    return (randn(g, B, T, HV, dtype=dtype), uniform(g, HV, lo=-2.0, hi=-0.5, dtype=dtype),
            0.5 * randn(g, HV, dtype=dtype))


def kda_raw_gate(g: torch.Generator, B: int, T: int, HV: int, K: int,
                 dtype: torch.dtype = F64) -> tuple[torch.Tensor, ...]:
    """(g_raw [B, T, HV, K], A_log [HV], dt_bias [HV * K]) for use_gate_in_kernel."""
    return (randn(g, B, T, HV, K, dtype=dtype), uniform(g, HV, lo=-2.0, hi=-0.5, dtype=dtype),
            0.5 * randn(g, HV * K, dtype=dtype))


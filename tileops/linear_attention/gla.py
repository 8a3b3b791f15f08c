"""Gated Linear Attention (GLA): chunked forward and backward, decode step and inference forward."""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from tileops import library
from tileops.callspec import CallSpec
from tileops.linear_attention.inference import check_sequences, check_state, check_tokens, fake_outputs
from tileops.linear_attention.op import Op, call_spec, gate_dtype
from tileops.linear_attention.validate import (
    FLOATS, Shapes, chunk_size_arg, param_dtypes, positive_scale, require, state_dtypes)
from tileops.targets import Target


def resolve_scale(scale: object, dim_k: int) -> float:
    """GLA's convention: a non-positive scale means dim_k ** -0.5."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"scale must be a number (non-positive for dim_k ** -0.5), got {scale!r}")
    return dim_k ** -0.5 if scale <= 0 else positive_scale("scale", scale, dim_k)


class GLAChunkResult(tuple):
    """The documented pair (o, final_state), which also carries ``h``: the fp32 states entering
    each chunk followed by the final state, [B, NT+1, H, K, V], what GLAChunkBwdOp takes."""

    h: torch.Tensor

    def __new__(cls, o: torch.Tensor, final_state: torch.Tensor, h: Optional[torch.Tensor] = None) -> "GLAChunkResult":
        result = super().__new__(cls, (o, final_state))
        result.h = h
        return result


class _GLAChunkOp(Op):
    def __init__(self, chunk_size: int, scale: float, *, target: Target) -> None:
        super().__init__(target=target)
        self.chunk_size = chunk_size_arg(chunk_size)
        resolve_scale(scale, 1)
        self.scale = scale

    def _check(self, shapes: Shapes, q: object, k: object, v: object, g: object) -> torch.dtype:
        dtype = check_tokens(shapes, q, k, v, value_heads="H")
        shapes.tensor("g", g, ["B", "T", "H", "K"], param_dtypes(dtype))
        return dtype

    def _spec(self, shapes: Shapes, q: torch.Tensor, mode: str, **flags: object) -> CallSpec:
        s = shapes.sizes
        return call_spec("gla", type(self).__name__, mode, q, batch=s["B"], tokens=s["T"], heads=s["H"],
                         value_heads=s["H"], dim_k=s["K"], dim_v=s["V"], chunk_size=self.chunk_size,
                         scale=resolve_scale(self.scale, s["K"]), **flags)


class GLAChunkFwdOp(_GLAChunkOp):
    """Gated Linear Attention (GLA) forward operator: (q, k, v, g) -> (o, final_state).

    Layout BTHD. The returned pair also carries ``.h`` [B, NT+1, H, K, V] (fp32), the per-chunk
    states that GLAChunkBwdOp takes: ``o, ht = op(...)`` works as documented, and
    ``out = op(...); GLAChunkBwdOp(...)(q, k, v, g, out.h, do, dht)`` pairs the two. (An external
    target that returns only (o, final_state) leaves ``.h`` None.)
    """

    def __init__(self, chunk_size: int = 64, scale: float = -1.0, *, target: Target = None) -> None:
        """Build the op. Shapes and dtype are taken from each call."""
        super().__init__(chunk_size, scale, target=target)

    def describe(self, q, k, v, g, initial_state=None) -> tuple[CallSpec, tuple]:
        shapes = Shapes()
        dtype = self._check(shapes, q, k, v, g)
        shapes.bind("N", shapes.sizes["B"], "q (N = B)")
        check_state(shapes, "initial_state", initial_state, dtype, heads="H", state_v_first=False)
        spec = self._spec(shapes, q, "chunk_fwd", has_initial_state=initial_state is not None,
                          gate_dtype=gate_dtype(g, dtype))
        return spec, (q, k, v, g, initial_state)

    def _fake(self, q, k, v, g, initial_state=None) -> tuple[torch.Tensor, ...]:
        o, final_state = fake_outputs(q, v, None, state_v_first=False)
        batch, length, heads, dim_k = q.shape
        chunks = (length + self.chunk_size - 1) // self.chunk_size
        return o, final_state, final_state.new_empty((batch, chunks + 1, heads, dim_k, v.shape[3]))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                initial_state: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Run GLA forward; returns (o, final_state) with ``.h`` attached."""
        out = super().forward(q, k, v, g, initial_state)
        if isinstance(out, torch.fx.Proxy):  # fx symbolic tracing records the custom op's (o, final_state, h)
            return out
        return GLAChunkResult(*out)


def chunk_gradient(op: GLAChunkFwdOp, inputs: tuple, outputs: tuple, grads: tuple) -> Optional[tuple]:
    """GLAChunkFwdOp's gradient by GLAChunkBwdOp (same chunk size, scale and target) when o and the
    final state carry the gradients, h none, and the call had no initial state (whose gradient the
    backward op does not give); else None."""
    if inputs[4] is not None or grads[2] is not None or (grads[0] is None and grads[1] is None):
        return None
    chunk_size, scale, target = library.settings_of(op)
    backward = library.instance("GLAChunkBwdOp", (chunk_size, scale, False, target))
    do = torch.zeros_like(outputs[0]) if grads[0] is None else grads[0]
    return backward(*inputs[:4], outputs[2], do, grads[1])


class GLAChunkBwdOp(_GLAChunkOp):
    """Gated Linear Attention (GLA) backward operator: gradients (dq, dk, dv, dg) given ``do``.

    Uses the ``h`` that GLAChunkFwdOp returns (no recomputation of the states); with
    ``has_initial_state`` the forward's initial state is read from h[:, 0]. ``dht`` is the
    gradient of the final state (None means zero).
    """

    def __init__(self, chunk_size: int = 64, scale: float = -1.0, has_initial_state: bool = False, *,
                 target: Target = None) -> None:
        """Build the op. Shapes and dtype are taken from each call."""
        super().__init__(chunk_size, scale, target=target)
        self.has_initial_state = bool(has_initial_state)

    def describe(self, q, k, v, g, h, do, dht) -> tuple[CallSpec, tuple]:
        shapes = Shapes()
        dtype = self._check(shapes, q, k, v, g)
        nt = -(-shapes.sizes["T"] // self.chunk_size)
        shapes.bind("NT+1", nt + 1, f"q (ceil(T / chunk_size) + 1 with chunk_size = {self.chunk_size})")
        shapes.tensor("h", h, ["B", "NT+1", "H", "K", "V"], state_dtypes(dtype))
        shapes.tensor("do", do, ["B", "T", "H", "V"], (dtype,))
        shapes.optional("dht", dht, ["B", "H", "K", "V"], state_dtypes(dtype))
        spec = self._spec(shapes, q, "chunk_bwd", has_initial_state=self.has_initial_state)
        return spec, (q, k, v, g, h, do, dht)

    def _fake(self, q, k, v, g, h, do, dht) -> tuple[torch.Tensor, ...]:
        return tuple(x.new_empty(x.shape) for x in (q, k, v, g))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, h: torch.Tensor,
                do: torch.Tensor, dht: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run GLA backward; returns (dq, dk, dv, dg)."""
        return super().forward(q, k, v, g, h, do, dht)


class GLARecurrentFwdOp(Op):
    """Gated Linear Attention (GLA) decode: S_new = diag(exp(gk)) @ S + outer(k, v);
    o = scale * q^T @ S_new. Layout BHD; float32, float16 and bfloat16 with fp32 accumulation."""

    def __init__(self, scale: float = -1.0, *, target: Target = None) -> None:
        """Build the op. Shapes and dtype are taken from each call."""
        super().__init__(target=target)
        resolve_scale(scale, 1)
        self.scale = scale

    def describe(self, q, k, v, gk, state) -> tuple[CallSpec, tuple]:
        shapes = Shapes()
        shapes.tensor("q", q, ["B", "H", "DK"], FLOATS)
        shapes.tensor("k", k, ["B", "H", "DK"], (q.dtype,))
        shapes.tensor("v", v, ["B", "H", "DV"], (q.dtype,))
        shapes.tensor("gk", gk, ["B", "H", "DK"], param_dtypes(q.dtype))
        shapes.tensor("state", state, ["B", "H", "DK", "DV"], param_dtypes(q.dtype))
        s = shapes.sizes
        spec = call_spec("gla", "GLARecurrentFwdOp", "step", q, batch=s["B"], tokens=1, heads=s["H"],
                         value_heads=s["H"], dim_k=s["DK"], dim_v=s["DV"],
                         scale=resolve_scale(self.scale, s["DK"]), state_dtype=str(state.dtype),
                         gate_dtype=gate_dtype(gk, q.dtype))
        return spec, (q, k, v, gk, state)

    def _fake(self, q, k, v, gk, state) -> tuple[torch.Tensor, torch.Tensor]:
        return q.new_empty(v.shape), state.new_empty(state.shape)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gk: torch.Tensor,
                state: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Run one decode step; returns o [B, H, DV] and new_state [B, H, DK, DV]."""
        return super().forward(q, k, v, gk, state)


class GLAFwdOp(Op):
    """Gated Linear Attention (GLA) for inference, with caller-owned FP32 state.

    Q, K, V and the log-space per-key gate G use BTHD. One call is equal-length prefill,
    packed-varlen prefill (``cu_seqlens``, B == 1) or single-token decode (T == 1). An absent
    initial_state starts from zero; every call returns (o, final_state).
    """

    def __init__(self, scale: Optional[float] = None, *, target: Target = None) -> None:
        """Fix the query scale and optional backend target for this instance."""
        super().__init__(target=target)
        if scale is not None:
            positive_scale("scale", scale, 1)
        self.scale = scale

    def describe(self, q, k, v, g, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None):
        shapes = Shapes()
        dtype = check_tokens(shapes, q, k, v, value_heads="H")
        shapes.tensor("g", g, ["B", "T", "H", "K"], param_dtypes(dtype))
        n, mode = check_sequences(shapes, cu_seqlens, cu_seqlens_cpu)
        check_state(shapes, "initial_state", initial_state, dtype, heads="H", state_v_first=False)
        s = shapes.sizes
        spec = call_spec("gla", "GLAFwdOp", mode, q, batch=n, tokens=s["T"], heads=s["H"], value_heads=s["H"],
                         dim_k=s["K"], dim_v=s["V"], scale=positive_scale("scale", self.scale, s["K"]),
                         has_initial_state=initial_state is not None, gate_dtype=gate_dtype(g, dtype))
        return spec, (q, k, v, g, initial_state, cu_seqlens, cu_seqlens_cpu)

    def _fake(self, q, k, v, g, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None):
        return fake_outputs(q, v, cu_seqlens, state_v_first=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                initial_state: Optional[torch.Tensor] = None, cu_seqlens: Optional[torch.Tensor] = None,
                cu_seqlens_cpu: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Run GLA prefill or decode and return output plus final FP32 state."""
        return super().forward(q, k, v, g, initial_state, cu_seqlens, cu_seqlens_cpu)

"""DeltaNet (ungated delta rule): chunked forward and backward (BHSD), decode step (BHD) and the
inference forward (BTHD, equal-length, packed varlen or decode)."""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from tileops import library
from tileops.callspec import CallSpec
from tileops.linear_attention.inference import check_sequences, check_state, check_tokens, fake_outputs
from tileops.linear_attention.op import Op, beta_dtype, call_spec
from tileops.linear_attention.validate import (
    FLOATS, Shapes, chunk_size_arg, param_dtypes, positive_scale, require, state_dtypes)
from tileops.targets import Target


class _ChunkedDeltaNetOp(Op):
    """Shared by the chunked DeltaNet ops: the chunk size and the BHSD input checks."""

    def __init__(self, chunk_size: int = 64, *, target: Target = None) -> None:
        super().__init__(target=target)
        self.chunk_size = chunk_size_arg(chunk_size)

    def _check_inputs(self, shapes: Shapes, q: object, k: object, v: object, beta: object) -> torch.dtype:
        shapes.tensor("q", q, ["B", "H", "S", "DK"], FLOATS)
        shapes.tensor("k", k, ["B", "H", "S", "DK"], (q.dtype,))
        shapes.tensor("v", v, ["B", "H", "S", "DV"], (q.dtype,))
        shapes.tensor("beta", beta, ["B", "H", "S"], param_dtypes(q.dtype))
        require(shapes.sizes["S"] >= 1, "q has no tokens (S = 0)")
        return q.dtype

    def _spec(self, shapes: Shapes, q: torch.Tensor, mode: str) -> CallSpec:
        s = shapes.sizes
        return call_spec("deltanet", type(self).__name__, mode, q, batch=s["B"], tokens=s["S"], heads=s["H"],
                         value_heads=s["H"], dim_k=s["DK"], dim_v=s["DV"], chunk_size=self.chunk_size)


class DeltaNetChunkFwdOp(_ChunkedDeltaNetOp):
    """DeltaNet forward operator (ungated).

    Pipeline: prepare_wy_repr(k, beta) -> (Aw, Au) -> deltanet_fwd(q, k, v, beta, Aw, Au) -> o.
    Layout: BHSD (batch, head, seq_len, dim): q/k [B, H, S, DK], v [B, H, S, DV], beta [B, H, S]
    (FLA's chunk_delta_rule uses BTHN instead). No query scale is applied, and the recurrence
    starts from a zero state.
    """

    def __init__(self, chunk_size: int = 64, *, target: Target = None) -> None:
        """Build the op. Shapes and dtype are taken from each call."""
        super().__init__(chunk_size, target=target)

    def describe(self, q, k, v, beta) -> tuple[CallSpec, tuple]:
        shapes = Shapes()
        self._check_inputs(shapes, q, k, v, beta)
        return self._spec(shapes, q, "chunk_fwd"), (q, k, v, beta)

    def _fake(self, q, k, v, beta) -> tuple[torch.Tensor, ...]:
        batch, heads, length, dim_k = q.shape
        chunks = (length + self.chunk_size - 1) // self.chunk_size
        per_chunk = q.new_empty((batch, heads, length, self.chunk_size))
        states = q.new_empty((batch, heads, chunks + 1, dim_k, v.shape[3]), dtype=state_dtypes(q.dtype)[0])
        return q.new_empty(v.shape), states, per_chunk, per_chunk.new_empty(per_chunk.shape), q.new_empty(q.shape), v.new_empty(v.shape)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                beta: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """Run deltanet forward; returns (o, S, Aw, Au, w, u): o [B, H, S, DV], the boundary states
        S [B, H, NC+1, DK, DV] (fp32), Aw and Au [B, H, S, BC], w [B, H, S, DK], u [B, H, S, DV]."""
        return super().forward(q, k, v, beta)


class DeltaNetChunkBwdOp(_ChunkedDeltaNetOp):
    """DeltaNet backward operator (ungated).

    Pipeline: prepare_wy_repr -> fwd (to get Aw, Au) -> bwd kernel -> (dq, dk, dv, dbeta).
    Takes what DeltaNetChunkFwdOp returned, with the same chunk size.
    """

    def __init__(self, chunk_size: int = 64, *, target: Target = None) -> None:
        """Build the op. Shapes and dtype are taken from each call."""
        super().__init__(chunk_size, target=target)

    def describe(self, do, q, k, v, beta, S, Aw, Au, w, u) -> tuple[CallSpec, tuple]:
        shapes = Shapes()
        dtype = self._check_inputs(shapes, q, k, v, beta)
        shapes.tensor("do", do, ["B", "H", "S", "DV"], (dtype,))
        nc = -(-shapes.sizes["S"] // self.chunk_size)
        shapes.bind("NC+1", nc + 1, f"q (ceil(S / chunk_size) + 1 with chunk_size = {self.chunk_size})")
        shapes.bind("BC", self.chunk_size, "the op's chunk_size")
        shapes.tensor("S", S, ["B", "H", "NC+1", "DK", "DV"], state_dtypes(dtype))
        for name, t in (("Aw", Aw), ("Au", Au)):
            shapes.tensor(name, t, ["B", "H", "S", "BC"], param_dtypes(dtype))
        shapes.tensor("w", w, ["B", "H", "S", "DK"], param_dtypes(dtype))
        shapes.tensor("u", u, ["B", "H", "S", "DV"], param_dtypes(dtype))
        return self._spec(shapes, q, "chunk_bwd"), (do, q, k, v, beta, S, Aw, Au, w, u)

    def _fake(self, do, q, k, v, beta, S, Aw, Au, w, u) -> tuple[torch.Tensor, ...]:
        return tuple(x.new_empty(x.shape) for x in (q, k, v, beta))

    def forward(self, do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                beta: torch.Tensor, S: torch.Tensor, Aw: torch.Tensor, Au: torch.Tensor, w: torch.Tensor,
                u: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run deltanet backward; returns (dq, dk, dv, dbeta)."""
        return super().forward(do, q, k, v, beta, S, Aw, Au, w, u)


def chunk_gradient(op: DeltaNetChunkFwdOp, inputs: tuple, outputs: tuple, grads: tuple) -> Optional[tuple]:
    """DeltaNetChunkFwdOp's gradient by DeltaNetChunkBwdOp (same chunk size and target) when only o
    carries one, as in training, where S, Aw, Au, w and u feed nothing but the backward; else None.
    The backward op is the one instance of its setting (``library.instance``), so repeated steps
    reuse its validated call descriptions."""
    if grads[0] is None or any(g is not None for g in grads[1:]):
        return None
    backward = library.instance("DeltaNetChunkBwdOp", library.settings_of(op))
    return backward(grads[0], *inputs, *outputs[1:])


class DeltaNetRecurrentFwdOp(Op):
    """DeltaNet decode (single-step recurrence, ungated).

    v_new = beta * (v - S @ k); o = S @ q + (q . k) * v_new; S_new = S + outer(k, v_new).
    Layout BHD. float32, float16 and bfloat16 with fp32 accumulation; the state is fp32 (or the
    input dtype) and new_state comes back in the state's dtype.
    """

    def __init__(self, *, target: Target = None) -> None:
        """Build the op. Shapes and dtype are taken from each call."""
        super().__init__(target=target)

    def describe(self, q, k, v, beta, state) -> tuple[CallSpec, tuple]:
        shapes = Shapes()
        shapes.tensor("q", q, ["B", "H", "DK"], FLOATS)
        shapes.tensor("k", k, ["B", "H", "DK"], (q.dtype,))
        shapes.tensor("v", v, ["B", "H", "DV"], (q.dtype,))
        shapes.tensor("beta", beta, ["B", "H"], param_dtypes(q.dtype))
        shapes.tensor("state", state, ["B", "H", "DK", "DV"], param_dtypes(q.dtype))
        s = shapes.sizes
        spec = call_spec("deltanet", "DeltaNetRecurrentFwdOp", "step", q, batch=s["B"], tokens=1, heads=s["H"],
                         value_heads=s["H"], dim_k=s["DK"], dim_v=s["DV"], scale=1.0,
                         state_dtype=str(state.dtype), beta_dtype=beta_dtype(beta, "step"))
        return spec, (q, k, v, beta, state)

    def _fake(self, q, k, v, beta, state) -> tuple[torch.Tensor, torch.Tensor]:
        return q.new_empty(v.shape), state.new_empty(state.shape)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                state: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Run one decode step; returns o [B, H, DV] and new_state [B, H, DK, DV]."""
        return super().forward(q, k, v, beta, state)


class DeltaNetFwdOp(Op):
    """Inference forward for the ungated delta rule.

    Input layout [B, T, H, D]; one call covers equal-length prefill, packed-varlen prefill
    (``cu_seqlens``, B == 1) and single-token decode (T == 1). The FP32 recurrent state belongs to
    the caller: ``initial_state`` [N, H, K, V] is optional and (o, final_state) is always returned.
    ``beta`` is the already-transformed update strength: no sigmoid is applied.
    """

    def __init__(self, scale: Optional[float] = None, use_qk_l2norm_in_kernel: bool = False, *,
                 target: Target = None) -> None:
        """Configure the attention scale, Q/K normalization, and target."""
        super().__init__(target=target)
        if scale is not None:
            positive_scale("scale", scale, 1)
        self.scale = scale
        self.use_qk_l2norm_in_kernel = bool(use_qk_l2norm_in_kernel)

    def describe(self, q, k, v, beta, initial_state=None, cu_seqlens=None,
                 cu_seqlens_cpu=None) -> tuple[CallSpec, tuple]:
        shapes = Shapes()
        dtype = check_tokens(shapes, q, k, v, value_heads="HV")
        shapes.tensor("beta", beta, ["B", "T", "HV"], param_dtypes(dtype))
        n, mode = check_sequences(shapes, cu_seqlens, cu_seqlens_cpu)
        check_state(shapes, "initial_state", initial_state, dtype, heads="HV", state_v_first=False)
        s = shapes.sizes
        spec = call_spec("deltanet", "DeltaNetFwdOp", mode, q, batch=n, tokens=s["T"], heads=s["H"],
                         value_heads=s["HV"], dim_k=s["K"], dim_v=s["V"],
                         scale=positive_scale("scale", self.scale, s["K"]),
                         use_qk_l2norm_in_kernel=self.use_qk_l2norm_in_kernel,
                         has_initial_state=initial_state is not None, beta_dtype=beta_dtype(beta, mode))
        return spec, (q, k, v, beta, initial_state, cu_seqlens, cu_seqlens_cpu)

    def _fake(self, q, k, v, beta, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None):
        return fake_outputs(q, v, cu_seqlens, state_v_first=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                initial_state: Optional[torch.Tensor] = None, cu_seqlens: Optional[torch.Tensor] = None,
                cu_seqlens_cpu: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Run prefill or decode and return (o, final_state)."""
        return super().forward(q, k, v, beta, initial_state, cu_seqlens, cu_seqlens_cpu)

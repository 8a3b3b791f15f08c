"""FLA's ``chunk_gated_delta_rule`` and ``fused_recurrent_gated_delta_rule`` on GDNFwdOp (a scalar
gate per value head) and, for a per-key gate ``gk``, KDAFwdOp."""

from __future__ import annotations

from typing import Any, Optional

import torch

from tileops.functional.common import chunk_size_arg, extra_kwargs, op_for, refuse, returned
from tileops.linear_attention import GDNFwdOp, KDAFwdOp


def chunk_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                           scale: Optional[float] = None, initial_state: Optional[torch.Tensor] = None,
                           output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                           use_beta_sigmoid_in_kernel: bool = False, allow_neg_eigval: bool = False,
                           state_v_first: bool = False, cu_seqlens: Optional[torch.LongTensor] = None,
                           cu_seqlens_cpu: Optional[torch.LongTensor] = None,
                           chunk_indices: Optional[torch.LongTensor] = None, cp_context: Any = None,
                           **kwargs) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The gated delta rule, q, k [B, T, H, K], v [B, T, HV, V], g and beta [B, T, HV]:
    (o, final_state or None). ``use_gate_in_kernel``, ``A_log`` and ``dt_bias`` come by keyword,
    as in FLA; ``chunk_indices`` is derived from ``cu_seqlens`` here and may be omitted."""
    extra = extra_kwargs("chunk_gated_delta_rule", kwargs, ("use_gate_in_kernel", "A_log", "dt_bias", "chunk_size"))
    chunk_size_arg("chunk_gated_delta_rule", extra, (16, 32, 64))
    refuse("chunk_gated_delta_rule", "cp_context", cp_context)
    use_gate_in_kernel = bool(extra.get("use_gate_in_kernel", False))
    op = op_for(GDNFwdOp, scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                state_v_first=state_v_first, use_gate_in_kernel=use_gate_in_kernel)
    gate = (extra.get("A_log"), extra.get("dt_bias")) if use_gate_in_kernel else (None, None)
    return returned(*op(q, k, v, g, beta, initial_state, cu_seqlens, cu_seqlens_cpu, *gate), output_final_state)


def fused_recurrent_gated_delta_rule(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: Optional[torch.Tensor] = None,
        gk: Optional[torch.Tensor] = None, gv: Optional[torch.Tensor] = None, beta: Optional[torch.Tensor] = None,
        scale: float = None, initial_state: torch.Tensor = None, output_final_state: bool = False,
        use_qk_l2norm_in_kernel: bool = False, use_gate_in_kernel: bool = False,
        A_log: Optional[torch.Tensor] = None, dt_bias: Optional[torch.Tensor] = None,
        use_beta_sigmoid_in_kernel: bool = False, allow_neg_eigval: bool = False, state_v_first: bool = False,
        cu_seqlens: Optional[torch.LongTensor] = None, **kwargs) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """As ``chunk_gated_delta_rule``, where the decay is ``g`` [B, T, HV], ``gk`` [B, T, HV, K]
    (KDAFwdOp), both (their sum), or neither (none); ``beta`` None means 1. Value gates ``gv``
    are refused, as is ``gk`` with ``use_gate_in_kernel``."""
    extra_kwargs("fused_recurrent_gated_delta_rule", kwargs, ())
    refuse("fused_recurrent_gated_delta_rule", "gv", gv)
    if beta is None:
        beta = v.new_ones(v.shape[:3])
    if not use_gate_in_kernel:
        A_log = dt_bias = None
    settings = dict(scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                    use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                    state_v_first=state_v_first, use_gate_in_kernel=use_gate_in_kernel)
    if gk is None:
        gate = g if g is not None else v.new_zeros(v.shape[:3])
        op = op_for(GDNFwdOp, **settings)
    else:
        if use_gate_in_kernel:
            raise NotImplementedError("fused_recurrent_gated_delta_rule: gk with use_gate_in_kernel=True is not "
                                      "supported by tileops (the in-kernel gate applies to g)")
        gate = gk if g is None else gk + g.unsqueeze(-1)
        op = op_for(KDAFwdOp, **settings)
    return returned(*op(q, k, v, gate, beta, initial_state, cu_seqlens, None, A_log, dt_bias), output_final_state)

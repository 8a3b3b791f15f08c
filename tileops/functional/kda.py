"""FLA's ``chunk_kda`` and ``fused_recurrent_kda`` on KDAFwdOp."""

from __future__ import annotations

from typing import Any, Optional

import torch

from tileops.functional.common import chunk_size_arg, extra_kwargs, op_for, refuse, returned
from tileops.linear_attention import KDAFwdOp


def _kda(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
         use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, lower_bound, state_v_first,
         cu_seqlens, cu_seqlens_cpu):
    if use_gate_in_kernel and A_log is None and lower_bound is not None:
        A_log = g.new_zeros(v.shape[2])  # FLA's gate without A_log: lower_bound * sigmoid(g + dt_bias)
    if not use_gate_in_kernel:
        A_log = dt_bias = lower_bound = None
    op = op_for(KDAFwdOp, scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                state_v_first=state_v_first, use_gate_in_kernel=use_gate_in_kernel, lower_bound=lower_bound)
    return returned(*op(q, k, v, g, beta, initial_state, cu_seqlens, cu_seqlens_cpu, A_log, dt_bias),
                    output_final_state)


def chunk_kda(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
              scale: Optional[float] = None, initial_state: Optional[torch.Tensor] = None,
              output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
              use_gate_in_kernel: bool = False, use_beta_sigmoid_in_kernel: bool = False,
              allow_neg_eigval: bool = False, safe_gate: bool = False, lower_bound: Optional[float] = None,
              disable_recompute: bool = False, return_intermediate_states: bool = False,
              state_v_first: bool = False, cu_seqlens: Optional[torch.LongTensor] = None,
              cu_seqlens_cpu: Optional[torch.LongTensor] = None, cp_context: Any = None, use_graph: bool = False,
              max_num_seqs: Optional[int] = None, **kwargs) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Kimi Delta Attention, g [B, T, HV, K] per-key log decays: (o, final_state or None).
    ``A_log`` and ``dt_bias`` come by keyword, as in FLA. ``safe_gate``, ``disable_recompute``,
    ``use_graph`` and ``max_num_seqs`` change how FLA runs, not the result, and are accepted."""
    extra = extra_kwargs("chunk_kda", kwargs, ("A_log", "dt_bias", "chunk_size"))
    chunk_size_arg("chunk_kda", extra, (32, 64))
    refuse("chunk_kda", "cp_context", cp_context)
    refuse("chunk_kda", "return_intermediate_states", return_intermediate_states, False)
    if use_gate_in_kernel and extra.get("A_log") is None and lower_bound is None:
        raise ValueError("chunk_kda: use_gate_in_kernel=True needs A_log unless lower_bound is set")
    return _kda(q, k, v, g, beta, extra.get("A_log"), extra.get("dt_bias"), scale, initial_state, output_final_state,
                use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
                lower_bound, state_v_first, cu_seqlens, cu_seqlens_cpu)


def fused_recurrent_kda(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                        A_log: Optional[torch.Tensor] = None, dt_bias: Optional[torch.Tensor] = None,
                        scale: Optional[float] = None, initial_state: torch.Tensor = None,
                        output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                        use_gate_in_kernel: bool = False, use_beta_sigmoid_in_kernel: bool = False,
                        allow_neg_eigval: bool = False, lower_bound: Optional[float] = None,
                        state_v_first: bool = False, cu_seqlens: Optional[torch.LongTensor] = None,
                        **kwargs) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """As ``chunk_kda``, with ``A_log`` and ``dt_bias`` as arguments."""
    extra_kwargs("fused_recurrent_kda", kwargs, ())
    return _kda(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, lower_bound, state_v_first,
                cu_seqlens, None)

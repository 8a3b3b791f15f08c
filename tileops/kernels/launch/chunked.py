"""Launching the GDN prefill: two passes, or the fused kernel.

The launcher only allocates outputs and launches: no host sync, and no per-call table building (a
config in pieces builds its tables once per set of lengths, copied without a sync), so it can be
captured in a CUDA graph. g, beta, A_log and dt_bias reach the first pass in fp32 (cast
here when they come in the token dtype: a few microseconds against a millisecond call), so one
program serves every dtype mix and a build compiles everything a call can need.
"""

from __future__ import annotations

from typing import Optional

import torch

from tileops.callspec import CallSpec
from tileops.kernels.config import KernelConfig
from tileops.kernels.launch.chunked_programs import (compile_chain, compile_fused, compile_piece_entries, compile_prep,
                                                     compile_summary, compile_warm_start)
from tileops.kernels.hardware import sm_count
from tileops.kernels.plans.entries import entry_plan
from tileops.kernels.plans.packing import packed
from tileops.kernels.plans.pieces import plan_for, summary_span, summary_tile


class NoGate:
    """``no_gate(device)``: fp32 zeros, one per head, standing in for A_log and dt_bias, which only
    use_gate_in_kernel reads; made on the first call, so that building allocates nothing on the
    device (a build may run without one)."""

    def __init__(self, heads: int):
        self.heads = heads
        self.zeros: Optional[torch.Tensor] = None

    def __call__(self, device: torch.device) -> torch.Tensor:
        if self.zeros is None:
            self.zeros = torch.zeros(self.heads, dtype=torch.float32, device=device)
        return self.zeros


class PrefillLauncher:
    """``launch(q, k, v, g, beta, initial_state, cu_seqlens, cu_seqlens_cpu, A_log, dt_bias)``."""

    def __init__(self, config: KernelConfig, spec: CallSpec, gated: bool = True):
        self.config = config
        self.spec = spec
        self.gated = gated
        self.varlen = spec.mode == "varlen"
        self.value_first = bool(spec.flag("state_v_first", False))
        self.fused = compile_fused(config, spec, gated) if config.fused else None
        pieces = bool(config.piece_chunks)
        # Without a gate nothing is forgotten: every later piece takes its exact entry, no warm-up.
        self.warm_start = compile_warm_start(config, spec, gated) if pieces and gated else None
        self.summary = compile_summary(config, spec, gated, summary_tile(spec, config.piece_chunks,
                                                                         config.chunk_size)) if pieces else None
        self.piece_entries = compile_piece_entries(spec) if pieces else None
        self.sms = sm_count(spec.device, spec.arch)
        self.chain = None if config.fused else compile_chain(config, spec)
        self.prep = None if config.fused else compile_prep(config, spec, gated)
        self.no_gate = NoGate(spec.value_heads)

    def warm_starts(self, plan, inputs, has_init, sequences):
        """Where each piece's warm-up begins (as far back as the bound asks) and the row of the
        initial state it begins from (−1: zeros), both [P, HV]; with the exact schedule, its own
        start and entry row N + p where the warm-up would reach further. ``inputs``: the flattened
        q, k, v, g, β, A_log and dt_bias the fused kernel reads."""
        _, flat_k, _, flat_g, flat_beta, a_log, bias = inputs
        begin = torch.empty(plan.count, flat_g.shape[1], dtype=torch.int32, device=flat_g.device)
        init_row = torch.empty_like(begin)
        self.warm_start(flat_k, flat_g, flat_beta, a_log, bias, plan.start, plan.first, plan.seq, has_init,
                        sequences, begin, init_row)
        return begin, init_row

    def summary_span(self, lengths: tuple[int, ...]) -> int:
        """The chunks each summary job walks for sequences of ``lengths`` (``plans.pieces.summary_span``)."""
        return summary_span(lengths, self.config.chunk_size, self.config.piece_chunks, self.spec.value_heads, self.sms)

    def exact_entries(self, plan, inputs, initial_state, walk_rows):
        """The initial state and the exact schedule's entry states in one tensor (``plans.entries``):
        the summaries of the pieces, then the chain of each cut sequence through them, for the
        (sequence, value head) pairs whose pieces ``walk_rows`` points at entry rows."""
        has_init = 0 if initial_state is None else 1
        heads = plan.starts.shape[1]
        ep = entry_plan(plan.lengths, self.config.piece_chunks, self.config.chunk_size, heads, plan.start.device,
                        self.summary_span(plan.lengths))
        state = (self.spec.dim_v, self.spec.dim_k) if self.value_first else (self.spec.dim_k, self.spec.dim_v)
        entries = torch.empty(ep.sequences + plan.count, heads, *state, dtype=torch.float32, device=plan.start.device)
        if initial_state is not None:
            entries[:ep.sequences].copy_(initial_state)
        summaries = torch.empty(ep.jobs, heads, *state, dtype=torch.float32, device=plan.start.device)
        self.summary(*inputs, entries, walk_rows, ep.job_chain, ep.chain_piece, ep.sequences, ep.begin, ep.end,
                     ep.end, ep.init_rows[has_init], ep.out_row, summaries)
        self.piece_entries(summaries, ep.chain_piece, ep.state_slot, ep.transition_slot, walk_rows, ep.sequences,
                           entries)
        return entries

    def walk_pieces(self, plan, inputs, h0, begin, init_row, flat_o, final):
        """Every piece from token ``begin`` and row ``init_row`` of ``h0`` (both [P, HV]), its
        outputs stored from its own start on; each sequence's last piece leaves its final state in
        ``final``."""
        self.fused(*inputs, h0, begin, plan.end, plan.start, init_row, plan.out_row, flat_o, final)

    def __call__(self, q, k, v, g, beta, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None,
                 A_log=None, dt_bias=None):
        B, T, H, K = q.shape
        HV, V = v.shape[2], v.shape[3]
        C = self.config.chunk_size
        tokens = B * T
        flat_q = packed(q, tokens, H, K)
        flat_k = packed(k, tokens, H, K)
        flat_v = packed(v, tokens, HV, V)
        flat_beta = packed(beta.float(), tokens, HV)
        # Without a gate the programs read no g: β, of its shape and dtype, stands in for it.
        flat_g = packed(g.float(), tokens, HV) if self.gated else flat_beta
        a_log = self.no_gate(q.device) if A_log is None else packed(A_log.float(), HV)
        bias = self.no_gate(q.device) if dt_bias is None else packed(dt_bias.float(), HV)

        o = torch.empty(B, T, HV, V, dtype=q.dtype, device=q.device)
        n = cu_seqlens.shape[0] - 1 if self.varlen else B
        state_shape = (n, HV, V, K) if self.value_first else (n, HV, K, V)
        final = torch.empty(state_shape, dtype=torch.float32, device=q.device)
        h0 = final if initial_state is None else packed(initial_state, *initial_state.shape)
        has_init = 0 if initial_state is None else 1
        flat_o = o.view(tokens, HV, V)
        bounds = None
        if self.varlen:
            bounds = cu_seqlens if cu_seqlens.dtype == torch.int32 else cu_seqlens.to(torch.int32)

        if self.config.piece_chunks:
            plan = plan_for(self.config.piece_chunks, C, HV, B, T, bounds, cu_seqlens_cpu, q.device)
            inputs = (flat_q, flat_k, flat_v, flat_g, flat_beta, a_log, bias)
            if plan.cut:
                if self.gated:
                    begin, init_row = self.warm_starts(plan, inputs, has_init, len(plan.lengths))
                else:
                    begin, init_row = plan.starts, plan.exact_rows[has_init]
                h0 = self.exact_entries(plan, inputs, initial_state, init_row)
            else:  # every piece a whole sequence: one launch, from the initial state
                begin, init_row = plan.starts, plan.entry_rows[has_init]
            self.walk_pieces(plan, inputs, h0, begin, init_row, flat_o, final)
            return o, final
        if self.fused is not None:
            inputs = (flat_q, flat_k, flat_v, flat_g, flat_beta, a_log, bias, h0)
            if self.varlen:
                self.fused(*inputs, bounds, flat_o, final, has_init)
            else:
                self.fused(*inputs, flat_o, final, T, has_init)
            return o, final
        tp = torch.empty(HV, tokens, C, dtype=q.dtype, device=q.device)
        m = torch.empty(HV, tokens, C, dtype=q.dtype, device=q.device)
        f = torch.empty(4, HV, tokens, dtype=torch.float32, device=q.device)
        if self.varlen:
            self.prep(flat_q, flat_k, flat_g, flat_beta, a_log, bias, bounds, tp, m, f)
            self.chain(flat_q, flat_k, flat_v, tp, m, f, h0, bounds, flat_o, final, has_init)
        else:
            self.prep(flat_q, flat_k, flat_g, flat_beta, a_log, bias, tp, m, f, T)
            self.chain(flat_q, flat_k, flat_v, tp, m, f, h0, flat_o, final, T, has_init)
        return o, final

"""Launching the prefill under one decay per key channel (KDA, GLA) in two passes:
``chunk_prep_channel`` for every chunk at once, then the value-major chain over the sequences.

As ``launch.chunked``: outputs allocated here, no host sync and no per-call table, so a call can be
captured in a CUDA graph; g reaches the first pass in the dtype the call passes it in (16-bit or
fp32: ``gate_dtype``), beta, A_log and dt_bias in fp32. Few long
sequences, of equal lengths or packed with their lengths on the host, are cut into pieces walked
side by side (``plans.channel_pieces``; KDA's also walked from the identity for their transitions).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from tileops.callspec import CallSpec
from tileops.kernels.config import KernelConfig
from tileops.kernels.launch.chunked import NoGate
from tileops.kernels.launch.chunked_programs import (FIRST_PASS_CONFIGS, PASS_CONFIGS, TL_DTYPES,
                                                     query_scale, sequences, transform_flags)
from tileops.kernels.launch.compiled import Program, compiled
from tileops.kernels.hardware import sm_count
from tileops.kernels.plans.channel_pieces import MIN_WINDOWS, CutPlan, cut_plan, may_cut, piece_windows, walk_tiles
from tileops.kernels.plans.packing import packed

def compile_channel_prep(config: KernelConfig, spec: CallSpec, delta: bool = True,
                         gate: Optional[torch.dtype] = None) -> Program:
    """The first pass for ``spec`` under one decay per key channel (``delta``: with the delta rule),
    reading g in ``gate`` (default: the call's ``gate_dtype``)."""
    flags = transform_flags(spec, True)
    del flags["gated"]
    args = dict(heads=spec.heads, value_heads=spec.value_heads, dim_k=spec.dim_k, chunk=config.chunk_size,
                sequences=sequences(spec), scale=query_scale(spec), lower_bound=spec.flag("lower_bound"),
                delta=delta, gate_dtype=TL_DTYPES[gate or spec.gate_dtype], **flags)
    return compiled("tileops.kernels.programs.chunk_prep_channel:channel_prep_program", args, spec.arch, FIRST_PASS_CONFIGS)


def compile_channel_chain(config: KernelConfig, spec: CallSpec, delta: bool = True, boundaries: bool = False,
                          transition: bool = False, outputs: bool = True) -> Program:
    """The value-major state pass for ``spec`` under one decay per key channel (``boundaries``:
    storing the state at every chunk boundary too; ``transition``: each sequence's Φ instead;
    without ``outputs``: its final state alone)."""
    args = dict(heads=spec.heads, value_heads=spec.value_heads, dim_k=spec.dim_k, dim_v=spec.dim_v,
                chunk=config.chunk_size, block_v=config.block_v, dtype=TL_DTYPES[spec.dtype],
                sequences=sequences(spec), state_v_first=bool(spec.flag("state_v_first", False)),
                threads=2 * config.block_v, num_stages=config.num_stages, channel=True,
                delta=delta, boundaries=boundaries)
    # Left out otherwise: the other programs' arguments (and cache keys) stay as they were.
    if transition:
        args["transition"] = True
    elif not outputs:
        args["outputs"] = False
    return compiled("tileops.kernels.programs.chain_value:chain_program", args, spec.arch, PASS_CONFIGS)


def compile_channel_entries(config: KernelConfig, spec: CallSpec, delta: bool = False) -> Program:
    """The entry states of cut pieces from their walks from zero (and, with ``delta``, their
    transitions): exact fp32 arithmetic."""
    args = dict(value_heads=spec.value_heads, dim_k=spec.dim_k, dim_v=spec.dim_v, chunk=config.chunk_size)
    if delta:
        args["delta"] = True
    return compiled("tileops.kernels.programs.channel_entries:channel_entries_program", args, spec.arch, PASS_CONFIGS)


class ChannelPrefillLauncher:
    """``launch(q, k, v, g, beta, initial_state, cu_seqlens, cu_seqlens_cpu, A_log, dt_bias)``, g
    [B, T, HV, K]; A_log [HV] and dt_bias [HV · K] or [HV, K] (zeros where absent). Without
    ``delta`` beta, A_log and dt_bias are not read. With ``boundaries`` (equal lengths) it returns
    (o, final, h), h [B, ceil(T / C) + 1, HV, K, V] the state entering each chunk, then the final
    one."""

    def __init__(self, config: KernelConfig, spec: CallSpec, delta: bool = True, boundaries: bool = False):
        self.config = config
        self.spec = spec
        self.delta = delta
        self.boundaries = boundaries
        self.varlen = spec.mode == "varlen"
        assert not (boundaries and self.varlen), "boundary states for equal lengths only"
        self.value_first = bool(spec.flag("state_v_first", False))
        self.prep = compile_channel_prep(config, spec, delta)
        self.chain = compile_channel_chain(config, spec, delta, boundaries)
        self.no_log_rate = NoGate(spec.value_heads)
        self.no_bias = NoGate(spec.value_heads * spec.dim_k)
        # Few long sequences: both passes again for the pieces, as packed sequences.
        self.cut_prep = self.cut_chain = self.cut_finals = self.cut_transition = self.cut_entries = None
        if may_cut(spec, config.block_v, delta):
            packed_spec = dataclasses.replace(spec, mode="varlen")
            self.cut_prep = compile_channel_prep(config, packed_spec, delta)
            self.cut_chain = compile_channel_chain(config, packed_spec, delta)
            self.cut_finals = compile_channel_chain(config, packed_spec, delta, outputs=False)
            if delta:
                self.cut_transition = compile_channel_chain(config, packed_spec, delta, transition=True)
            self.cut_entries = compile_channel_entries(config, spec, delta)
        self.tiles = walk_tiles(spec, config.block_v)
        self.sms = sm_count(spec.device, spec.arch)

    def cut_plan(self, lengths: tuple[int, ...], device: torch.device) -> Optional[CutPlan]:
        """The pieces sequences of ``lengths`` are cut into, or None when they are walked whole."""
        width = 0 if self.cut_chain is None else piece_windows(lengths, self.config.chunk_size, self.tiles, self.sms,
                                                               self.delta)
        return cut_plan(lengths, width, self.config.chunk_size, device) if width else None

    def __call__(self, q, k, v, g, beta, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None,
                 A_log=None, dt_bias=None):
        B, T, H, K = q.shape
        HV, V = v.shape[2], v.shape[3]
        C = self.config.chunk_size
        tokens = B * T
        flat_q, flat_k = packed(q, tokens, H, K), packed(k, tokens, H, K)
        flat_v = packed(v, tokens, HV, V)
        flat_g = packed(g, tokens, HV, K)  # in the spec's gate_dtype (the program refuses another)
        o = torch.empty(B, T, HV, V, dtype=q.dtype, device=q.device)
        n = cu_seqlens.shape[0] - 1 if self.varlen else B
        final = torch.empty((n, HV, V, K) if self.value_first else (n, HV, K, V), dtype=torch.float32,
                            device=q.device)
        h0 = final if initial_state is None else packed(initial_state, *initial_state.shape)
        has_init = 0 if initial_state is None else 1
        m = torch.empty(HV, tokens, C, dtype=q.dtype, device=q.device)
        qo, ks = (torch.empty(HV, tokens, K, dtype=q.dtype, device=q.device) for _ in range(2))
        lengths = None
        if self.cut_chain is not None:  # lengths the host knows: equal, or packed with cu_seqlens_cpu
            if not self.varlen:
                lengths = (T,) * B
            elif cu_seqlens_cpu is not None and cu_seqlens_cpu.numel() > 1:
                sizes = cu_seqlens_cpu[1:] - cu_seqlens_cpu[:-1]
                if int(sizes.max()) > 2 * MIN_WINDOWS * C:  # else no cut pays: spare the host the plan
                    lengths = tuple(sizes.tolist())
        plan = None if lengths is None else self.cut_plan(lengths, q.device)
        # The state's decay over each window's last segment, then over each sequence's (piece's) last.
        decay = torch.empty(HV, -(-tokens // C) + (n if plan is None else plan.count), K, dtype=torch.float32,
                            device=q.device)
        flat_o = o.view(tokens, HV, V)
        if self.delta:
            flat_beta = packed(beta.float(), tokens, HV)
            a_log = self.no_log_rate(q.device) if A_log is None else packed(A_log.float(), HV)
            bias = self.no_bias(q.device) if dt_bias is None else packed(dt_bias.float(), HV * K)
            tp = torch.empty_like(m)
            kx = torch.empty_like(qo)
            first = (flat_q, flat_k, flat_g, flat_beta, a_log, bias)
            firsts = (tp, m, qo, kx, ks, decay)
            walk = (qo, kx, ks, flat_v, tp, m, decay, h0)
        else:
            first, firsts, walk = (flat_q, flat_k, flat_g), (m, qo, ks, decay), (qo, ks, flat_v, m, decay, h0)
        if plan is not None:
            return self.cut(plan, first, firsts, walk, flat_o, o, final, initial_state is not None)
        if self.varlen:
            bounds = cu_seqlens if cu_seqlens.dtype == torch.int32 else cu_seqlens.to(torch.int32)
            self.prep(*first, bounds, *firsts)
            self.chain(*walk, bounds, flat_o, final, has_init)
            return o, final
        self.prep(*first, *firsts, T)
        if not self.boundaries:
            self.chain(*walk, flat_o, final, T, has_init)
            return o, final
        h = torch.empty(B, -(-T // C) + 1, HV, K, V, dtype=torch.float32, device=q.device)
        self.chain(*walk, flat_o, final, h, T, has_init)
        return o, final, h

    def cut(self, plan, first, firsts, walk, flat_o, o, final, has_init):
        """The call with its sequences cut as ``plan`` says (``plans.channel_pieces``): the first
        pass and a walk from zero for every piece, for its final state alone (under the delta rule
        one from the identity too: its transition), the entries, the walk again from them, with
        the outputs."""
        self.cut_prep(*first, plan.bounds, *firsts)
        *inputs, decay, h0 = walk
        states = torch.empty(plan.count, *final.shape[1:], dtype=final.dtype, device=final.device)
        self.cut_finals(*inputs, decay, states, plan.bounds, flat_o, states, 0)
        steps = decay  # what carries a piece's entry to the next: its decay rows, or its transition
        if self.cut_transition is not None:
            steps = torch.empty_like(states)  # K = V: Φ has a state's shape
            self.cut_transition(*inputs, decay, steps, plan.bounds, flat_o, steps, 0)
        entries = torch.empty_like(states)
        self.cut_entries(states, steps, h0, plan.bounds, plan.first, plan.last, int(has_init), entries)
        self.cut_chain(*inputs, decay, entries, plan.bounds, flat_o, states, 1)
        torch.index_select(states, 0, plan.last, out=final)
        return o, final

"""Launching the chunked forward of the training ops (BHSD): the WY solve of every chunk with its
inverse kept, the key-major chain with the state stored at every chunk boundary, then w and u.

Each (batch, head) of a [B, H, S, D] tensor is a contiguous run of S tokens, so the programs see
B·H equal sequences of one head: q, k, v, the outputs and the boundary states are the callers'
tensors viewed flat, never copied. No gate is read (β stands in for g's argument), the query
scale is 1 and the state starts at zero. One launch each, no host sync.
"""

from __future__ import annotations

import torch

from tileops.callspec import CallSpec
from tileops.kernels.config import KernelConfig
from tileops.kernels.launch.chunked import NoGate
from tileops.kernels.launch.chunked_programs import FIRST_PASS_CONFIGS, PASS_CONFIGS, TL_DTYPES
from tileops.kernels.launch.compiled import compiled


class ChunkFwdLauncher:
    """``launch(q, k, v, beta)`` -> (o, S, Aw, Au, w, u), as ``DeltaNetChunkFwdOp`` returns them."""

    def __init__(self, config: KernelConfig, spec: CallSpec):
        self.config = config
        self.chunk = C = spec.flag("chunk_size")
        dtype, K, V = TL_DTYPES[spec.dtype], spec.dim_k, spec.dim_v
        self.prep = compiled(
            "tileops.kernels.programs.chunk_prep:prep_program",
            dict(heads=1, value_heads=1, dim_k=K, chunk=C, dtype=dtype, sequences="equal", l2norm=False, gated=False,
                 gate_in_kernel=False, beta_sigmoid=False, neg_eigval=False, scale=1.0, inverse_out=True),
            spec.arch, FIRST_PASS_CONFIGS)
        self.chain = compiled(
            "tileops.kernels.programs.chain_key:chain_program",
            dict(heads=1, value_heads=1, dim_k=K, dim_v=V, chunk=C, block_v=config.block_v, dtype=dtype,
                 sequences="equal", state_v_first=False, threads=config.threads, num_stages=config.num_stages,
                 boundaries=True),
            spec.arch, PASS_CONFIGS)
        self.wy = compiled("tileops.kernels.programs.wy_fast:wy_program",
                           dict(heads=1, value_heads=1, dim_k=K, dim_v=V, chunk=C, dtype=dtype), spec.arch, PASS_CONFIGS)
        self.no_gate = NoGate(1)

    def __call__(self, q, k, v, beta):
        B, H, S, K = q.shape
        V = v.shape[3]
        C = self.chunk
        n, tokens = B * H, B * H * S
        flat_q, flat_k = q.contiguous().view(tokens, 1, K), k.contiguous().view(tokens, 1, K)
        flat_v = v.contiguous().view(tokens, 1, V)
        flat_beta = beta.float().contiguous().view(tokens, 1)
        no_gate = self.no_gate(q.device)
        tp = torch.empty(1, tokens, C, dtype=q.dtype, device=q.device)
        m = torch.empty_like(tp)
        f = torch.empty(4, 1, tokens, dtype=torch.float32, device=q.device)
        a_inv = torch.empty(B, H, S, C, dtype=q.dtype, device=q.device)
        self.prep(flat_q, flat_k, flat_beta, flat_beta, no_gate, no_gate, tp, m, f, a_inv.view(1, tokens, C), S)
        o = torch.empty(B, H, S, V, dtype=q.dtype, device=q.device)
        states = torch.empty(B, H, -(-S // C) + 1, K, V, dtype=torch.float32, device=q.device)
        final = torch.empty(n, 1, K, V, dtype=torch.float32, device=q.device)  # also the unread h0
        self.chain(flat_q, flat_k, flat_v, tp, m, f, final, o.view(tokens, 1, V), final,
                   states.view(n, 1, -1, K, V), S, 0)
        w = torch.empty(B, H, S, K, dtype=q.dtype, device=q.device)
        u = torch.empty(B, H, S, V, dtype=q.dtype, device=q.device)
        self.wy(a_inv.view(1, tokens, C), flat_k, flat_v, flat_beta, w.view(tokens, 1, K), u.view(tokens, 1, V))
        return o, states, a_inv, a_inv.clone(), w, u

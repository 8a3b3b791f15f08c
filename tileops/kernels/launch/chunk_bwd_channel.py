"""Launching GLA's chunked backward (BTHD): the forward's first pass again (M, Q_o, K_s and each
chunk's decay: ``chunk_prep_channel`` without the delta rule), the backward state walk
(``chunk_dh_channel``), then every chunk's gradients (``chunk_grads_channel``).

Three launches, no host sync; the first pass's outputs and the state gradients dS (in the token
dtype) are the only intermediates. The programs see the B sequences of T tokens as one packed token axis.
"""

from __future__ import annotations

import torch

from tileops.callspec import CallSpec
from tileops.kernels.config import KernelConfig
from tileops.kernels.launch.chunked_channel import compile_channel_prep
from tileops.kernels.launch.chunked_programs import FIRST_PASS_CONFIGS, PASS_CONFIGS, TL_DTYPES, query_scale
from tileops.kernels.launch.compiled import compiled
from tileops.kernels.plans.packing import packed


WALK_STAGES = 2  # the walk's pipeline: the next chunk's loads under this one's product


class ChannelChunkBwdLauncher:
    """``launch(q, k, v, g, h, do, dht)`` -> (dq, dk, dv, dg), as ``GLAChunkBwdOp`` returns them:
    h [B, T / C + 1, H, K, V] the forward's states (h[:, 0] read only with the spec's
    ``has_initial_state``), dht the final state's gradient or None."""

    def __init__(self, config: KernelConfig, spec: CallSpec):
        self.chunk = C = config.chunk_size
        dtype, K, V = TL_DTYPES[spec.dtype], spec.dim_k, spec.dim_v
        self.has_init = int(bool(spec.flag("has_initial_state", False)))
        self.prep = compile_channel_prep(config, spec, delta=False, gate=torch.float32)  # g once in fp32 for all three
        self.walk = compiled("tileops.kernels.programs.chunk_dh_channel:dh_channel_program",
                             dict(heads=spec.heads, dim_k=K, dim_v=V, chunk=C, block_v=config.block_v, dtype=dtype,
                                  num_stages=WALK_STAGES), spec.arch, PASS_CONFIGS)
        self.grads = compiled("tileops.kernels.programs.chunk_grads_channel:grads_channel_program",
                              dict(heads=spec.heads, dim_k=K, dim_v=V, chunk=C, dtype=dtype, scale=query_scale(spec)),
                              spec.arch, FIRST_PASS_CONFIGS)

    def __call__(self, q, k, v, g, h, do, dht):
        B, T, H, K = q.shape
        V = v.shape[3]
        C = self.chunk
        tokens, chunks = B * T, T // C
        flat_q, flat_k, flat_g = packed(q, tokens, H, K), packed(k, tokens, H, K), packed(g.float(), tokens, H, K)
        flat_v, flat_do = packed(v, tokens, H, V), packed(do.to(q.dtype), tokens, H, V)
        m = torch.empty(H, tokens, C, dtype=q.dtype, device=q.device)
        qo, ks = (torch.empty(H, tokens, K, dtype=q.dtype, device=q.device) for _ in range(2))
        decay = torch.empty(H, B * chunks + B, K, dtype=torch.float32, device=q.device)
        self.prep(flat_q, flat_k, flat_g, m, qo, ks, decay, T)
        dh = torch.empty(B, chunks, H, K, V, dtype=q.dtype, device=q.device)
        final_grad = dht.float().contiguous() if dht is not None else torch.empty(B, H, K, V, dtype=torch.float32,
                                                                                  device=q.device)
        self.walk(qo, flat_do, decay, final_grad, int(dht is not None), dh)
        dq, dk = torch.empty_like(q), torch.empty_like(k)
        dv = torch.empty(B, T, H, V, dtype=q.dtype, device=q.device)
        dg = torch.empty(B, T, H, K, dtype=torch.float32, device=q.device)
        self.grads(flat_q, flat_k, flat_v, flat_do, flat_g, m, ks, h.float().contiguous(), dh, self.has_init,
                   dq.view(tokens, H, K), dk.view(tokens, H, K), dv.view(tokens, H, V), dg.view(tokens, H, K))
        return dq, dk, dv, dg.to(g.dtype)

"""Launching the chunked backward of the training ops (BHSD): the backward state walk (``chunk_dh``),
then every chunk's gradients at once (``chunk_grads``).

As in the forward, each (batch, head) is a run of S tokens, so the programs see B·H sequences of
one head, the callers' tensors viewed flat. Two launches, no host sync; the walk's dS' and dΔ
are the only intermediates (in the token dtype).
"""

from __future__ import annotations

import torch

from tileops.callspec import CallSpec
from tileops.kernels.config import KernelConfig
from tileops.kernels.launch.chunked_programs import PASS_CONFIGS, TL_DTYPES
from tileops.kernels.launch.compiled import compiled


class ChunkBwdLauncher:
    """``launch(do, q, k, v, beta, S, Aw, Au, w, u)`` -> (dq, dk, dv, dbeta), as
    ``DeltaNetChunkBwdOp`` returns them. Aw is the chunks' inverse (Au, equal without a gate, is not
    read); the states S are the forward's, S[:, :, 0] the one it started from."""

    def __init__(self, config: KernelConfig, spec: CallSpec):
        self.config = config
        self.chunk = C = spec.flag("chunk_size")
        dtype, K, V = TL_DTYPES[spec.dtype], spec.dim_k, spec.dim_v
        self.walk = compiled("tileops.kernels.programs.chunk_dh:dh_program",
                             dict(dim_k=K, dim_v=V, chunk=C, block_v=config.block_v, dtype=dtype,
                                  threads=config.threads, num_stages=config.num_stages), spec.arch, PASS_CONFIGS)
        self.grads = compiled("tileops.kernels.programs.chunk_grads:grads_program", dict(dim_k=K, dim_v=V, chunk=C, dtype=dtype),
                              spec.arch, PASS_CONFIGS)

    def __call__(self, do, q, k, v, beta, S, Aw, Au, w, u):
        B, H, L, K = q.shape
        V = v.shape[3]
        n, chunks = B * H, L // self.chunk

        def flat(x, width):
            return x.to(q.dtype).contiguous().view(n, L, width)

        fq, fk, fw = flat(q, K), flat(k, K), flat(w, K)
        fv, fu, fdo = flat(v, V), flat(u, V), flat(do, V)
        dh = torch.empty(n, chunks, K, V, dtype=q.dtype, device=q.device)
        dv_new = torch.empty(n, L, V, dtype=q.dtype, device=q.device)
        self.walk(fq, fk, fw, fdo, dh, dv_new)
        dq, dk = (torch.empty(B, H, L, K, dtype=q.dtype, device=q.device) for _ in range(2))
        dv = torch.empty(B, H, L, V, dtype=q.dtype, device=q.device)
        dbeta = torch.empty(B, H, L, dtype=torch.float32, device=q.device)
        self.grads(fq, fk, fv, beta.float().contiguous().view(n, L), flat(Aw, self.chunk), fw, fu, fdo,
                   S.float().contiguous().view(n, chunks + 1, K, V), dh, dv_new, dq.view(n, L, K), dk.view(n, L, K),
                   dv.view(n, L, V), dbeta.view(n, L))
        return dq, dk, dv, dbeta.to(beta.dtype)

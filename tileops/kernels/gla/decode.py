"""tl.gla_decode: GLA's single-token step, the shared decode program's plain gated sum under one
decay per key channel: S_new = diag(e^g) S + k vᵀ, o = scale · S_newᵀ q.

Serves GLAFwdOp's decode calls ([B, 1, H, D], fp32 state) and GLARecurrentFwdOp's steps
([B, H, D], a state in fp32 or the token dtype): fp32 element-wise arithmetic, no TF32.
"""

from __future__ import annotations

import torch

from tileops.callspec import CallSpec
from tileops.kernels.decode_kernel import register_decode
from tileops.kernels.plans.decode_tile import DecodeRule

TOKEN_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def adapt(launcher, spec: CallSpec):
    """The op's forward arguments onto the shared step."""
    if spec.entry == "GLARecurrentFwdOp":
        def step(q, k, v, gk, state):
            o, new_state = launcher.step(q[:, None], k[:, None], v[:, None], gk[:, None], None, state)
            return o[:, 0], new_state
        return step

    def launch(q, k, v, g, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None):
        return launcher.step(q, k, v, g, None, initial_state)
    return launch


KERNEL = register_decode("tl.gla_decode", "gla", DecodeRule("channel", False), ("decode", "step"),
                         TOKEN_DTYPES, adapt, "tileops.kernels.gla.decode")

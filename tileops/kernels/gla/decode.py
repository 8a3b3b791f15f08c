"""tl.gla_decode: GLA's single-token step, the shared decode program's plain gated sum under one
decay per key channel: S_new = diag(e^g) S + k vᵀ, o = scale · S_newᵀ q.

Serves GLAFwdOp's decode calls ([B, 1, H, D], fp32 state) and GLARecurrentFwdOp's steps
([B, H, D], a state in fp32 or the token dtype): fp32 element-wise arithmetic, no TF32.
"""

from __future__ import annotations

import torch

from tileops.kernels.decode_kernel import register_decode
from tileops.kernels.plans.decode_tile import DecodeRule

TOKEN_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

KERNEL = register_decode("tl.gla_decode", "gla", DecodeRule("channel", False), ("decode", "step"), TOKEN_DTYPES,
                         "tileops.kernels.gla.decode")

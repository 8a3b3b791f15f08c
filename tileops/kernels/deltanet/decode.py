"""tl.deltanet_decode: DeltaNet's single-token step, the shared decode program without a gate.

Serves DeltaNetFwdOp's decode calls ([B, 1, H, D], fp32 state) and DeltaNetRecurrentFwdOp's steps
([B, H, D], a state in fp32 or the token dtype, no query scale): fp32 arithmetic on element-wise
products throughout, so fp32 tokens lose nothing to TF32.
"""

from __future__ import annotations

import torch

from tileops.kernels.decode_kernel import register_decode
from tileops.kernels.plans.decode_tile import DecodeRule

TOKEN_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

KERNEL = register_decode("tl.deltanet_decode", "deltanet", DecodeRule("none", True), ("decode", "step"), TOKEN_DTYPES,
                         "tileops.kernels.deltanet.decode")

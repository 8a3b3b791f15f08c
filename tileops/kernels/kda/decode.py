"""tl.kda_decode: KDA's single-token step, the shared decode program's delta rule under one decay
per key channel, applied to the state before the step reads it.

Every flag KDAFwdOp takes: both state layouts, the L2 norm, the beta sigmoid (and 2·sigmoid), and
the in-kernel gate from A_log and an optional dt_bias ([HV·K] or [HV, K]), with or without
lower_bound, formed so that it is finite or an exact reset, never NaN.
"""

from __future__ import annotations

import torch

from tileops.kernels.decode_kernel import register_decode
from tileops.kernels.plans.decode_tile import DecodeRule

TOKEN_DTYPES = (torch.float16, torch.bfloat16)

KERNEL = register_decode("tl.kda_decode", "kda", DecodeRule("channel", True), ("decode",), TOKEN_DTYPES,
                         "tileops.kernels.kda.decode")

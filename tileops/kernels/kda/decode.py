"""tl.kda_decode: KDA's single-token step, the shared decode program's delta rule under one decay
per key channel, applied to the state before the step reads it.

Every flag KDAFwdOp takes: both state layouts, the L2 norm, the beta sigmoid (and 2·sigmoid), and
the in-kernel gate from A_log and an optional dt_bias ([HV·K] or [HV, K]), with or without
lower_bound, formed so that it is finite or an exact reset, never NaN.
"""

from __future__ import annotations

import torch

from tileops.callspec import CallSpec
from tileops.kernels.decode_kernel import register_decode
from tileops.kernels.plans.decode_tile import DecodeRule

TOKEN_DTYPES = (torch.float16, torch.bfloat16)


def adapt(launcher, spec: CallSpec):
    """KDAFwdOp's forward arguments onto the shared step, dt_bias flattened to [HV·K]."""
    def launch(q, k, v, g, beta, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None, A_log=None,
               dt_bias=None):
        return launcher.step(q, k, v, g, beta, initial_state, A_log, None if dt_bias is None else dt_bias.reshape(-1))
    return launch


KERNEL = register_decode("tl.kda_decode", "kda", DecodeRule("channel", True), ("decode",), TOKEN_DTYPES, adapt,
                         "tileops.kernels.kda.decode")

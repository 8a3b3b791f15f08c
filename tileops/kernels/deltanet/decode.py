"""tl.deltanet_decode: DeltaNet's single-token step, the shared decode program without a gate.

Serves DeltaNetFwdOp's decode calls ([B, 1, H, D], fp32 state) and DeltaNetRecurrentFwdOp's steps
([B, H, D], a state in fp32 or the token dtype, no query scale): fp32 arithmetic on element-wise
products throughout, so fp32 tokens lose nothing to TF32.
"""

from __future__ import annotations

import torch

from tileops.callspec import CallSpec
from tileops.kernels.decode_kernel import register_decode
from tileops.kernels.plans.decode_tile import DecodeRule

TOKEN_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def adapt(launcher, spec: CallSpec):
    """The op's forward arguments onto the shared step."""
    if spec.entry == "DeltaNetRecurrentFwdOp":
        def step(q, k, v, beta, state):
            o, new_state = launcher.step(q[:, None], k[:, None], v[:, None], None, beta[:, None], state)
            return o[:, 0], new_state
        return step

    def launch(q, k, v, beta, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None):
        return launcher.step(q, k, v, None, beta, initial_state)
    return launch


KERNEL = register_decode("tl.deltanet_decode", "deltanet", DecodeRule("none", True), ("decode", "step"),
                         TOKEN_DTYPES, adapt, "tileops.kernels.deltanet.decode")

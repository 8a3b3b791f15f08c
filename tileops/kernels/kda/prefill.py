"""tl.kda_prefill: KDA's chunked prefill (equal lengths and packed varlen), the per-channel prefill
(``channel_prefill_kernel``) with the delta rule. Every flag KDAFwdOp takes is served in the
kernel: both state layouts, the L2 norm, the β sigmoid (and 2·sigmoid) and the gate from A_log,
an optional dt_bias and an optional lower bound."""

from tileops.kernels.channel_prefill_kernel import register_channel_prefill

KERNEL = register_channel_prefill("tl.kda_prefill", "kda", "tileops.kernels.kda.prefill", delta=True)

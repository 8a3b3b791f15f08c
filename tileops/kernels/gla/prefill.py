"""tl.gla_prefill: GLAFwdOp's chunked prefill (equal lengths and packed varlen), the per-channel
prefill (``channel_prefill_kernel``) without the delta rule: S ← diag(e^{g}) S + k vᵀ, o = scale ·
Sᵀ q, key-major or no initial state, fp32 state."""

from tileops.kernels.channel_prefill_kernel import register_channel_prefill


def forward_order(launcher):
    """GLAFwdOp's (q, k, v, g, initial_state, cu_seqlens, cu_seqlens_cpu) onto the launcher."""
    def launch(q, k, v, g, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None):
        return launcher(q, k, v, g, None, initial_state, cu_seqlens, cu_seqlens_cpu)
    return launch


KERNEL = register_channel_prefill("tl.gla_prefill", "gla", "tileops.kernels.gla.prefill", delta=False,
                                  order=forward_order)

"""tl.deltanet_prefill: DeltaNet's chunked prefill (equal-length and packed), the shared prefill
kernel (``prefill_kernel``) without a gate: the programs read no g, and every piece of a cut
sequence after its first starts from its exact entry state (with no decay a warm-up never ends)."""

from tileops.kernels.prefill_kernel import register_prefill


def forward_order(launcher):
    """DeltaNetFwdOp's (q, k, v, beta, initial_state, cu_seqlens, cu_seqlens_cpu) onto the launcher."""
    def launch(q, k, v, beta, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None):
        return launcher(q, k, v, None, beta, initial_state, cu_seqlens, cu_seqlens_cpu)
    return launch


KERNEL = register_prefill("tl.deltanet_prefill", "deltanet", gated=False, module="tileops.kernels.deltanet.prefill",
                          order=forward_order)

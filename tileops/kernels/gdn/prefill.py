"""tl.gdn_prefill: Gated DeltaNet's chunked prefill, the shared prefill kernel (``prefill_kernel``)
with one log decay per value head; its launcher takes the ops' own order (q, k, v, g, beta,
initial_state, cu_seqlens, cu_seqlens_cpu, A_log, dt_bias)."""

from tileops.kernels.prefill_kernel import register_prefill

KERNEL = register_prefill("tl.gdn_prefill", "gdn", gated=True, module="tileops.kernels.gdn.prefill")

"""GLA TileLang kernels (per-channel gates, no delta rule): chunked prefill, single-token decode
and the chunked training forward and backward."""

from tileops.kernels.gla import chunk_bwd, chunk_fwd, decode, prefill  # noqa: F401  (each registers its kernel)

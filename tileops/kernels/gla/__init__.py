"""GLA TileLang kernels (per-channel gates, no delta rule): chunked prefill, single-token decode
and the chunked training forward."""

from tileops.kernels.gla import chunk_fwd, decode, prefill  # noqa: F401  (each registers its kernel)

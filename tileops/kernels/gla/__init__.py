"""GLA TileLang kernels (per-channel gates, no delta rule): chunked prefill and single-token decode."""

from tileops.kernels.gla import decode, prefill  # noqa: F401  (each registers its kernel)

"""DeltaNet TileLang kernels (the delta rule without a gate): chunked prefill, single-token decode
and the chunked training forward and backward."""

from tileops.kernels.deltanet import chunk_bwd, chunk_fwd, decode, prefill  # noqa: F401  (each registers its kernel)

"""DeltaNet TileLang kernels (the delta rule without a gate): chunked prefill and single-token decode."""

from tileops.kernels.deltanet import decode, prefill  # noqa: F401  (both register their kernels)

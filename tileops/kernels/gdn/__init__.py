"""Gated DeltaNet TileLang kernels for Hopper: chunked prefill and single-token decode."""

from tileops.kernels.gdn import decode, prefill  # noqa: F401  (both register their kernels)

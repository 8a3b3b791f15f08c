"""KDA TileLang kernels (the delta rule under per-channel gates): chunked prefill and single-token decode."""

from tileops.kernels.kda import decode, prefill  # noqa: F401  (each registers its kernel)

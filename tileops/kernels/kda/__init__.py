"""KDA TileLang kernels (the delta rule under per-channel gates): single-token decode."""

from tileops.kernels.kda import decode  # noqa: F401  (registers its kernel)

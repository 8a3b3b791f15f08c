"""DeltaNet TileLang kernels (the delta rule without a gate): single-token decode."""

from tileops.kernels.deltanet import decode  # noqa: F401  (registers its kernel)

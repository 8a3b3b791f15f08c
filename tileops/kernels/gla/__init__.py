"""GLA TileLang kernels (per-channel gates, no delta rule): single-token decode."""

from tileops.kernels.gla import decode  # noqa: F401  (registers its kernel)

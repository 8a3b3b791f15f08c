"""tl.gdn_decode: the Gated DeltaNet single-token step as one fused, bandwidth-bound kernel.

Registered on the shared decode pieces (``decode_kernel``): the plan's config space of V-tile and
threads per CTA, its default, the program of ``programs.decode`` under the delta rule with one
decay per head, and the launcher of ``launch.decode``, which allocates the outputs and launches
once with no host sync, so it can be captured in a CUDA graph.
"""

from __future__ import annotations

from tileops.kernels.decode_kernel import register_decode
from tileops.kernels.calls import HALF_DTYPES
from tileops.kernels.plans.decode_tile import DELTA_SCALAR

KERNEL = register_decode("tl.gdn_decode", "gdn", DELTA_SCALAR, ("decode",), HALF_DTYPES, "tileops.kernels.gdn.decode")

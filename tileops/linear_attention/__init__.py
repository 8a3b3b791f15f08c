"""The linear-attention operators of the specification, plus target selection."""

from tileops.linear_attention.deltanet import (
    DeltaNetChunkBwdOp, DeltaNetChunkFwdOp, DeltaNetFwdOp, DeltaNetRecurrentFwdOp, chunk_gradient)
from tileops.linear_attention.gated_delta import GDNFwdOp, KDAFwdOp
from tileops.linear_attention.gla import GLAChunkBwdOp, GLAChunkFwdOp, GLAFwdOp, GLARecurrentFwdOp
from tileops.linear_attention.gla import chunk_gradient as gla_chunk_gradient
from tileops.targets import BUILTIN, REFERENCE, Target, register_target, unregister_target
from tileops import library

library.register(DeltaNetChunkFwdOp, 6, gradient=chunk_gradient)
library.register(GLAChunkFwdOp, 3, gradient=gla_chunk_gradient)
for _op, _outputs in ((DeltaNetRecurrentFwdOp, 2), (DeltaNetFwdOp, 2), (GDNFwdOp, 2),
                      (KDAFwdOp, 2), (GLARecurrentFwdOp, 2), (GLAFwdOp, 2)):
    library.register(_op, _outputs)
library.register(DeltaNetChunkBwdOp, 4, differentiable=False)
library.register(GLAChunkBwdOp, 4, differentiable=False)

__all__ = [
    "BUILTIN", "REFERENCE", "Target", "register_target", "unregister_target",
    "DeltaNetChunkFwdOp", "DeltaNetChunkBwdOp", "DeltaNetRecurrentFwdOp", "DeltaNetFwdOp",
    "GDNFwdOp", "KDAFwdOp", "GLAChunkFwdOp", "GLAChunkBwdOp", "GLARecurrentFwdOp", "GLAFwdOp",
]

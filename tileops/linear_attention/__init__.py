"""The linear-attention operators of the specification, plus target selection."""

from tileops.linear_attention.deltanet import (
    DeltaNetChunkBwdOp, DeltaNetChunkFwdOp, DeltaNetFwdOp, DeltaNetRecurrentFwdOp)
from tileops.linear_attention.gated_delta import GDNFwdOp, KDAFwdOp
from tileops.linear_attention.gla import GLAChunkBwdOp, GLAChunkFwdOp, GLAFwdOp, GLARecurrentFwdOp
from tileops.targets import BUILTIN, REFERENCE, Target, register_target, unregister_target

__all__ = [
    "BUILTIN", "REFERENCE", "Target", "register_target", "unregister_target",
    "DeltaNetChunkFwdOp", "DeltaNetChunkBwdOp", "DeltaNetRecurrentFwdOp", "DeltaNetFwdOp",
    "GDNFwdOp", "KDAFwdOp", "GLAChunkFwdOp", "GLAChunkBwdOp", "GLARecurrentFwdOp", "GLAFwdOp",
]

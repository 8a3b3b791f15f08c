"""The PyTorch semantics of every op: what the GPU kernels are checked against, and the CPU path.

Conventions: compute in float64 for float64 inputs, float32 otherwise; outputs o return in q's
dtype, states in the compute dtype, key-major [N, HV, K, V] unless a function says otherwise.
"""

from tileops.reference.backward import deltanet_chunk_backward, gla_chunk_backward
from tileops.reference.delta_rule import (chunk_delta_rule, delta_rule_step, deltanet_chunk_forward,
                                          recurrent_delta_rule)
from tileops.reference.gla import chunk_gla, gla_step, recurrent_gla
from tileops.reference.transforms import beta_transform, gdn_gate, kda_gate, l2norm

__all__ = [
    "beta_transform", "chunk_delta_rule", "chunk_gla", "delta_rule_step", "deltanet_chunk_backward",
    "deltanet_chunk_forward", "gdn_gate", "gla_chunk_backward", "gla_step", "kda_gate", "l2norm",
    "recurrent_delta_rule", "recurrent_gla",
]

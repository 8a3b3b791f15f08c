"""FLA-compatible functions on the tileops ops: FLA 0.6.0's names, arguments, defaults and return
convention ((o, final_state), final_state None unless ``output_final_state``), differentiable.

Swap ``from fla.ops.gated_delta_rule import chunk_gated_delta_rule`` for
``from tileops.functional import chunk_gated_delta_rule``; likewise for the other seven.
"""

from tileops.functional.delta_rule import chunk_delta_rule, fused_recurrent_delta_rule
from tileops.functional.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
from tileops.functional.gla import chunk_gla, fused_recurrent_gla
from tileops.functional.kda import chunk_kda, fused_recurrent_kda

__all__ = [
    "chunk_delta_rule", "chunk_gated_delta_rule", "chunk_gla", "chunk_kda", "fused_recurrent_delta_rule",
    "fused_recurrent_gated_delta_rule", "fused_recurrent_gla", "fused_recurrent_kda",
]

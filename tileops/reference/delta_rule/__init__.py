"""The delta rule (DeltaNet, GDN, KDA): the token-by-token definition and the chunked form."""

from tileops.reference.delta_rule.chunk import chunk_delta_rule, deltanet_chunk_forward
from tileops.reference.delta_rule.naive import delta_rule_step, recurrent_delta_rule

__all__ = ["chunk_delta_rule", "delta_rule_step", "deltanet_chunk_forward", "recurrent_delta_rule"]

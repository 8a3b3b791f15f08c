"""Gated linear attention: the token-by-token definition and the chunked form."""

from tileops.reference.gla.chunk import chunk_gla
from tileops.reference.gla.naive import gla_step, recurrent_gla

__all__ = ["chunk_gla", "gla_step", "recurrent_gla"]

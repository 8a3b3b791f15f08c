"""Host-side plans, plain Python: tile footprints (``tiles``), pieces and their warm-up (``pieces``),
input packing (``packing``) and the decode thread tiling (``decode_tile``)."""

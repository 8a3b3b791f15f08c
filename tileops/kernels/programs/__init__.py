"""Whole programs, each composed from ``blocks`` and specialised on everything but lengths.

- ``chunk_prep``: the two-pass first pass (transforms, cumsum, kkt, solve_tril, M and factors)
- ``chain_key`` / ``chain_value``: the two-pass state walk, S or Sᵀ in registers (``chain``:
  their shared entry)
- ``chunk_fused``: both passes in one warp-specialised kernel
- ``warm_start``: where each piece's warm-up walk begins
- ``decode``: the single-token step
"""

"""Device building blocks of the chunked form, named by role; whole programs compose them.

- ``transforms``: input transforms (the gate from A_log and dt_bias, β's sigmoid, L2 norms)
- ``kkt``: K Kᵀ and Q Kᵀ of a chunk on the tensor cores
- ``channel_pairs``: under one decay per key channel, the pairs inside a chunk's 16-row blocks
- ``window_fold``: under one decay per key channel, a chunk's K Kᵀ and Q Kᵀ in one fold about each
  channel's midpoint, where the decays' span allows it
- ``solve_tril`` and ``wy_merge``: the WY solve (I + A)⁻¹ through shared memory
- ``wy_registers``: the chunk's gates (cumsum), decays, masks and WY inverse on the products'
  accumulator registers, for the fused kernel
- ``chunk_h``: one chunk of the state walk (outputs, chunk_o, included), value-major;
  ``walk_moves`` its transposing matrix moves
- ``chunk_loads``, ``state_io``: a chunk's inputs in, the state tile in and out
- ``entry``: the one kernel entry for equal-length, packed and pieces calls
"""

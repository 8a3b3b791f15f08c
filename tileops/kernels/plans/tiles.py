"""The tiles of the chunked programs and what they take of an SM: plain Python, no compiler, so
config checks and defaults need not import TileLang."""

from __future__ import annotations

from tileops.kernels.hardware import SMEM_SLACK

FUSED_CHUNK = 64  # the fused kernel's chunk: one wgmma M extent
FUSED_STAGES = 2  # chunks the fused kernel holds at once: the one walked and the one being prepared
# 16-bit elements padding each row of the tiles a wgmma fragment writes or reads across rows (a
# warp touches 8 rows at once): 16 bytes shift each row by 4 banks, so those rows hit distinct banks.
ROW_PAD = 8
PAD = 8  # fp32 words padding each row of A and D⁻¹ in the solve, for the same reason as ROW_PAD
EXCHANGE_LD = 24  # fp16 row stride of a block the fused first pass exchanges: 8-row moves hit distinct banks
EXCHANGE_BLOCKS = 6  # X_0 β, X_1 β, X_2 β, N_10, N_20, N_21
EXCHANGE_BYTES = EXCHANGE_BLOCKS * 16 * EXCHANGE_LD * 2


def chain_smem_bytes(chunk: int, dim_k: int, block_v: int, stages: int, key_major: bool, elem: int,
                     channel: bool = False) -> int:
    """Shared memory of the chain: pipelined inputs per stage plus the per-chunk work tiles (the
    state's copy and four C × block_v tiles key-major; only the output tile value-major), the V and
    output tiles with their padded rows. ``channel``: under one decay per key channel a stage holds
    three key tiles (Q_o, K_x, K_s) and the K column decays instead of the row factors."""
    C, K, BV = chunk, dim_k, block_v
    padded = C * (BV + ROW_PAD)  # the V and output tiles
    keys, factors = (3 * C * K, K * 4) if channel else (2 * C * K, 4 * C * 4)
    per_stage = (keys + padded + 2 * C * C) * elem + factors
    work = (K * BV + 3 * C * BV + padded if key_major else padded) * elem
    return stages * per_stage + work + SMEM_SLACK


def fused_smem_bytes(dim_k: int, elem: int, stages: int = FUSED_STAGES, walk_moves: str = "elementwise") -> int:
    """Shared memory of the fused kernel, exactly (TileLang packs its buffers, all multiples of
    256 bytes, without gaps): ``stages`` stages of a chunk's inputs (q, k, v, g, β), two of its
    T', M and factors, the output tile (none with three stages and the matrix moves, whose output
    goes out through the V tile; two for the copy engine's output, which stores one while the
    next is written) and the first pass's work: four row vectors and the inverse's exchange."""
    C, K, V = FUSED_CHUNK, dim_k, dim_k
    inputs = stages * ((2 * C * K + C * V) * elem + 2 * C * 4)
    results = FUSED_STAGES * (2 * C * C * elem + 4 * C * 4)
    output = 0 if stages > FUSED_STAGES and walk_moves == "matrix" else C * V * elem
    if walk_moves == "tma-output":
        output *= 2
    work = 4 * C * 4 + EXCHANGE_BYTES
    return inputs + results + output + work

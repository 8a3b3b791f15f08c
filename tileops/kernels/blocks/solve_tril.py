"""The WY solve (I + A)⁻¹ of a chunk, A strictly lower, on one warpgroup: the diagonal 16 × 16
blocks by forward substitution (one thread per column, exact in fp32), the blocks below them by
``wy_merge`` on the tensor cores."""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.blocks.wy_merge import BLOCK, block_merge

LANES = 8  # partial sums per row of the forward substitution
NEWEST = 2  # entries of a column subtracted last in each row of it, outside the partial sums


def lane_total(acc, lanes: int = LANES):
    """The sum of ``lanes`` partial sums (an expression, built when the program is traced), added
    pairwise: log2(lanes) dependent additions instead of lanes − 1."""
    terms = [acc[p] for p in range(lanes)]
    while len(terms) > 1:
        terms = [terms[p] + terms[p + 1] if p + 1 < len(terms) else terms[p] for p in range(0, len(terms), 2)]
    return terms[0]


def block_substitution(block: int):
    """A macro that writes into the local ``x`` (``block`` entries) column ``col_thread % block``
    of the inverse of diagonal block ``col_thread // block`` of I + A (A strictly lower, fp32, in
    ``a_s``), by forward substitution with the column in registers.

    A row's terms from all but its NEWEST newest entries are summed in LANES partial sums while
    those entries are still being found, and the newest are subtracted last: the chain from one
    row to the next is NEWEST multiply-adds."""
    B = block

    @T.macro
    def substitute(a_s, x, col_thread):
        acc = T.alloc_local([LANES], "float32")
        blk = col_thread // B
        col = col_thread % B
        for r in T.unroll(B, explicit=True):
            for p in T.unroll(LANES, explicit=True):
                acc[p] = 0.0
            for j in T.unroll(B, explicit=True):
                if j < r - NEWEST:
                    acc[j % LANES] = acc[j % LANES] - a_s[blk * B + r, blk * B + j] * x[j]
            x[r] = T.if_then_else(col == r, 1.0, 0.0) + lane_total(acc)
            for j in T.unroll(B, explicit=True):
                if r - NEWEST <= j and j < r:
                    x[r] = x[r] - a_s[blk * B + r, blk * B + j] * x[j]

    return substitute


def upper_clear(chunk: int):
    """A macro that zeroes ``d_s`` above its diagonal BLOCK × BLOCK blocks, where ``wy_solve``
    leaves it untouched: once for every solve that reuses the tile."""
    C = chunk

    @T.macro
    def clear(d_s):
        for i, j in T.Parallel(C, C):
            if i // BLOCK < j // BLOCK:
                d_s[i, j] = 0.0

    return clear


def wy_solve(chunk: int, dtype: str):
    """A macro for the 128 threads of one warpgroup (``row`` 0..127) that writes (I + A)⁻¹ into
    ``d_s`` on and below its diagonal blocks, from A (strictly lower, fp32, in ``a_s``): the
    diagonal blocks' inverses by ``block_substitution`` (one thread per column, exact in fp32),
    then the blocks below them by ``wy_merge.block_merge`` on the tensor cores. ``w_s``
    ([4 · BLOCK, SCRATCH_LD] fp32) is scratch; the kernel's prelude needs ``wy_merge.SOURCE``."""
    C = chunk
    substitute = block_substitution(BLOCK)
    merge = block_merge(C, dtype)

    @T.macro
    def solve(a_s, d_s, w_s, row):
        x = T.alloc_local([BLOCK], "float32")
        if row < C:
            substitute(a_s, x, row)
            for r in T.unroll(BLOCK, explicit=True):
                d_s[row // BLOCK * BLOCK + r, row] = x[r]
        merge(a_s, d_s, w_s, row)

    return solve

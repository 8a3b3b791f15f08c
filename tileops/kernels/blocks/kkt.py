"""The chunk's key products on the tensor cores: K Kᵀ (which becomes A of the WY form) and Q Kᵀ
(the chunk's own attention M, or K Qᵀ for Mᵀ), with the L2 norm's row factors beside them."""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.blocks.transforms import row_rnorm


def key_products(*, rows: int, width: int, l2norm: bool, keys_first: bool = False, wait: bool = True,
                 queries: bool = True):
    """A macro that writes the L2 norm's row factors of q and k (ones without the norm), then
    K Kᵀ into ``a_f`` and Q Kᵀ into ``qk_f`` (K Qᵀ with ``keys_first``). Without ``wait`` it only
    starts the two products on one warpgroup's tensor cores; the caller waits for them
    (``T.wait_wgmma(0)``) and fences their accumulators. Without ``queries`` only K Kᵀ and the
    keys' factors (the queries' are ones)."""
    rnorm = row_rnorm(rows, width)

    @T.macro
    def products(q_s, k_s, rq_s, rk_s, a_f, qk_f):
        if l2norm:
            rnorm(k_s, rk_s)
            if queries:
                rnorm(q_s, rq_s)
            else:
                for i in T.Parallel(rows):
                    rq_s[i] = 1.0
        else:
            for i in T.Parallel(rows):
                rk_s[i] = 1.0
                rq_s[i] = 1.0

        gemm = T.gemm if wait else T.wgmma_gemm
        gemm(k_s, k_s, a_f, transpose_B=True, clear_accum=True)
        if not queries:
            pass
        elif keys_first:
            gemm(k_s, q_s, qk_f, transpose_B=True, clear_accum=True)
        else:
            gemm(q_s, k_s, qk_f, transpose_B=True, clear_accum=True)

    return products

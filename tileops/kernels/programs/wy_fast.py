"""The WY factors of every chunk, from its inverse: w = (I + A)⁻¹ (β ⊙ K) and u = (I + A)⁻¹ (β ⊙ V).

What the chunked training ops return beside the inverse (``chunk_prep`` with ``inverse_out``),
and what their backward starts from. Fully parallel: one CTA per (value head, C-token window),
two tensor-core products. Windows are those of ``chunk_prep``: the inverse is block-diagonal per
sequence, so a window that holds the end of one sequence and the start of the next mixes nothing.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.hardware import WARPGROUP


def wy_program(*, heads: int, value_heads: int, dim_k: int, dim_v: int, chunk: int, dtype: str):
    """The TileLang program: inputs a_inv [HV, tokens, C] and k [tokens, H, K], v [tokens, HV, V]
    in the token dtype, beta [tokens, HV] in fp32; outputs w [tokens, HV, K] and u [tokens, HV, V]
    in the token dtype. Grid: (HV, ceil(tokens / C)), one warpgroup."""
    H, HV, K, V, C = heads, value_heads, dim_k, dim_v, chunk
    group = HV // H
    accum = "float32"
    tokens = T.dynamic("tokens")

    @T.prim_func
    def wy(
        a_inv: T.Tensor([HV, tokens, C], dtype),
        k: T.Tensor([tokens, H, K], dtype),
        v: T.Tensor([tokens, HV, V], dtype),
        beta: T.Tensor([tokens, HV], accum),
        w: T.Tensor([tokens, HV, K], dtype),
        u: T.Tensor([tokens, HV, V], dtype),
    ):
        with T.Kernel(HV, T.ceildiv(tokens, C), threads=WARPGROUP) as (hv, win):
            t0 = win * C
            a_s = T.alloc_shared([C, C], dtype)
            bk_s = T.alloc_shared([C, K], dtype)
            bv_s = T.alloc_shared([C, V], dtype)
            w_f = T.alloc_fragment([C, K], accum)
            u_f = T.alloc_fragment([C, V], accum)
            for i, j in T.Parallel(C, C):
                a_s[i, j] = T.if_then_else(t0 + i < tokens, a_inv[hv, t0 + i, j], T.cast(0, dtype))
            for i, j in T.Parallel(C, K):
                bk_s[i, j] = T.if_then_else(
                    t0 + i < tokens, T.cast(beta[t0 + i, hv] * T.cast(k[t0 + i, hv // group, j], accum), dtype),
                    T.cast(0, dtype))
            for i, j in T.Parallel(C, V):
                bv_s[i, j] = T.if_then_else(
                    t0 + i < tokens, T.cast(beta[t0 + i, hv] * T.cast(v[t0 + i, hv, j], accum), dtype),
                    T.cast(0, dtype))
            T.gemm(a_s, bk_s, w_f, clear_accum=True)
            T.gemm(a_s, bv_s, u_f, clear_accum=True)
            for i, j in T.Parallel(C, K):
                if t0 + i < tokens:
                    w[t0 + i, hv, j] = w_f[i, j]
            for i, j in T.Parallel(C, V):
                if t0 + i < tokens:
                    u[t0 + i, hv, j] = u_f[i, j]

    return wy

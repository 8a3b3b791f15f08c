"""The backward's state walk, last chunk first: the gradient of every chunk's end state, and of
every chunk's δ's (the v_new = u − w S of the forward).

The forward's chunk, from the state S it starts at: Δ = U − W S, O = Q S + M Δ with M the
lower triangle (diagonal included) of Q Kᵀ, S' = S + Kᵀ Δ. With dS' the gradient of the state
it ends at (zero after the last chunk), the chunk's gradients are

    dΔ = Mᵀ dO + K dS'          dS = dS' + Qᵀ dO − Wᵀ dΔ

One CTA per (V tile, sequence) walks its sequence's chunks backwards with dS (K × block_v, fp32)
in registers: five tensor-core products a chunk, of which only K dS' and Wᵀ dΔ wait on the one
before. It stores dS' (in the token dtype, the operand the gradients' pass multiplies) and dΔ.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures


def dh_program(*, dim_k: int, dim_v: int, chunk: int, block_v: int, dtype: str, threads: int, num_stages: int):
    """The TileLang program: q, k, w [walks, length, K] and do [walks, length, V] in the token dtype
    (length a multiple of ``chunk``; walks the independent sequences); outputs dh [walks, length /
    chunk, K, V] (the gradient of each chunk's end state) and dv [walks, length, V] (dΔ), both in
    the token dtype. Grid: (V / block_v, walks)."""
    K, V, C, BV = dim_k, dim_v, chunk, block_v
    accum = "float32"
    walks, length, chunks = T.dynamic("walks"), T.dynamic("length"), T.dynamic("chunks")

    @T.prim_func
    def chunk_dh(
        q: T.Tensor([walks, length, K], dtype),
        k: T.Tensor([walks, length, K], dtype),
        w: T.Tensor([walks, length, K], dtype),
        do: T.Tensor([walks, length, V], dtype),
        dh: T.Tensor([walks, chunks, K, V], dtype),
        dv: T.Tensor([walks, length, V], dtype),
    ):
        with T.Kernel(V // BV, walks, threads=threads) as (bv, n):
            v0 = bv * BV
            q_s = T.alloc_shared([C, K], dtype)
            k_s = T.alloc_shared([C, K], dtype)
            w_s = T.alloc_shared([C, K], dtype)
            do_s = T.alloc_shared([C, BV], dtype)
            m_f = T.alloc_fragment([C, C], accum)
            m_s = T.alloc_shared([C, C], dtype)
            ds_f = T.alloc_fragment([K, BV], accum)
            ds_s = T.alloc_shared([K, BV], dtype)
            dd_f = T.alloc_fragment([C, BV], accum)
            dd_s = T.alloc_shared([C, BV], dtype)
            neg_s = T.alloc_shared([C, BV], dtype)
            T.clear(ds_f)
            for r in T.Pipelined(chunks, num_stages=num_stages):
                c = chunks - 1 - r
                t0 = c * C
                T.copy(q[n, t0:t0 + C, :], q_s)
                T.copy(k[n, t0:t0 + C, :], k_s)
                T.copy(w[n, t0:t0 + C, :], w_s)
                T.copy(do[n, t0:t0 + C, v0:v0 + BV], do_s)
                T.copy(ds_f, ds_s)
                T.copy(ds_s, dh[n, c, :, v0:v0 + BV])
                T.gemm(k_s, q_s, m_f, transpose_B=True, clear_accum=True)
                for i, j in T.Parallel(C, C):
                    m_s[i, j] = T.if_then_else(i <= j, m_f[i, j], 0.0)
                T.gemm(m_s, do_s, dd_f, clear_accum=True)
                T.gemm(k_s, ds_s, dd_f)
                for i, j in T.Parallel(C, BV):
                    dd_s[i, j] = dd_f[i, j]
                    neg_s[i, j] = -dd_f[i, j]
                T.copy(dd_s, dv[n, t0:t0 + C, v0:v0 + BV])
                T.gemm(q_s, do_s, ds_f, transpose_A=True)
                T.gemm(w_s, neg_s, ds_f, transpose_A=True)

    return chunk_dh

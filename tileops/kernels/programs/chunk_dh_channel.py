"""GLA's backward state walk, last chunk first: the gradient of the state leaving every chunk.

With Q_o = scale q ⊙ e^γ (γ the log decays summed down the chunk, per key channel) and e^Γ the
chunk's decay (the forward's first pass writes both), the state entering chunk c meets the loss
through its outputs Q_o S and through the next chunk's state e^Γ ⊙ S + K_sᵀ V, so

    dS_c = e^{Γ_c} ⊙ dS_{c+1} + Q_oᵀ dO_c        (dS after the last chunk: dht, or zeros).

One CTA per (V tile, head, sequence) walks its chunks backward with dS (K × block_v, fp32) in
registers: a row scaling and one tensor-core product a chunk. Before each step it stores dS_{c+1}
in the token dtype: the gradients' pass hands it to the tensor cores in that dtype anyway, and the
walk's stores and the pass's loads move half the bytes of fp32.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures


def dh_channel_program(*, heads: int, dim_k: int, dim_v: int, chunk: int, block_v: int, dtype: str,
                       num_stages: int):
    """The TileLang program: ``qo`` [H, tokens, K] (the first pass's Q_o), ``do`` [tokens, H, V] in
    the token dtype, ``decay`` [H, rows, K] (row b · NT + c: chunk c of sequence b), ``dht``
    [B, H, K, V] (read with ``has_dht`` only) and ``has_dht``, then ``dh`` [B, NT, H, K, V] in the
    token dtype: dS_{c+1} for chunk c. Sequences of NT whole chunks. Grid: (V / block_v, H, B)."""
    H, K, V, C, BV = heads, dim_k, dim_v, chunk, block_v
    accum = "float32"
    tokens, rows, batch, chunks = T.dynamic("tokens"), T.dynamic("decay_rows"), T.dynamic("batch"), T.dynamic("chunks")

    @T.prim_func
    def chunk_dh_channel(
        qo: T.Tensor([H, tokens, K], dtype),
        do: T.Tensor([tokens, H, V], dtype),
        decay: T.Tensor([H, rows, K], accum),
        dht: T.Tensor([batch, H, K, V], accum),
        has_dht: T.int32,
        dh: T.Tensor([batch, chunks, H, K, V], dtype),
    ):
        with T.Kernel(V // BV, H, batch, threads=128) as (bv, h, b):
            v0 = bv * BV
            qo_s = T.alloc_shared([C, K], dtype)
            do_s = T.alloc_shared([C, BV], dtype)
            dec_s = T.alloc_shared([K], accum)
            ds_s = T.alloc_shared([K, BV], dtype)  # the store goes through shared memory: wide writes
            ds_f = T.alloc_fragment([K, BV], accum)
            if has_dht > 0:
                T.copy(dht[b, h, :, v0:v0 + BV], ds_f)
            else:
                T.clear(ds_f)
            for r in T.Pipelined(chunks, num_stages=num_stages):
                c = chunks - 1 - r
                t0 = (b * chunks + c) * C
                T.copy(qo[h, t0:t0 + C, :], qo_s)
                T.copy(do[t0:t0 + C, h, v0:v0 + BV], do_s)
                T.copy(decay[h, b * chunks + c, :], dec_s)
                T.copy(ds_f, ds_s)
                T.copy(ds_s, dh[b, c, h, :, v0:v0 + BV])
                for i, j in T.Parallel(K, BV):
                    ds_f[i, j] = ds_f[i, j] * dec_s[i]
                T.gemm(qo_s, do_s, ds_f, transpose_A=True)

    return chunk_dh_channel

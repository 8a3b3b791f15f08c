"""What both chain layouts share: the kernel entry (arguments, grid, each CTA's sequence bounds),
the loads of a chunk's inputs and the moves of the state tile in and out."""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures


def chunk_loader(chunk: int, block_v: int):
    """A macro that copies the chunk at token t0 into shared tiles (or parts of tiles): q and k of
    key head h, the V tile at v0 of value head hv (``v_s``: the first ``block_v`` columns of padded
    rows), its T' and M rows and its four row factors."""
    C, BV = chunk, block_v

    @T.macro
    def load_chunk(q, k, v, tp, m, f, q_s, k_s, v_s, tp_s, m_s, f_s, t0, h, hv, v0):
        T.copy(q[t0:t0 + C, h, :], q_s)
        T.copy(k[t0:t0 + C, h, :], k_s)
        T.copy(v[t0:t0 + C, hv, v0:v0 + BV], v_s)
        T.copy(tp[hv, t0:t0 + C, :], tp_s)
        T.copy(m[hv, t0:t0 + C, :], m_s)
        T.copy(f[:, hv, t0:t0 + C], f_s)

    return load_chunk


def state_io(*, value_rows: bool, rows: int, cols: int, state_v_first: bool):
    """Two macros that move the state tile at value column v0 between registers (``rows`` ×
    ``cols``: value-major Sᵀ when ``value_rows``, else key-major S) and the initial state (zeros
    without one) or the final state, in either of the state's layouts ([.., V, K] with
    ``state_v_first``, else [.., K, V])."""
    R, W = rows, cols
    same = value_rows == state_v_first  # the tile's axes in the state tensor's order

    @T.macro
    def load_state(h0, s_f, n, hv, v0, has_init):
        if value_rows and same:
            for i, j in T.Parallel(R, W):
                s_f[i, j] = T.if_then_else(has_init != 0, h0[n, hv, v0 + i, j], 0.0)
        elif value_rows:
            for i, j in T.Parallel(R, W):
                s_f[i, j] = T.if_then_else(has_init != 0, h0[n, hv, j, v0 + i], 0.0)
        elif same:
            for i, j in T.Parallel(R, W):
                s_f[i, j] = T.if_then_else(has_init != 0, h0[n, hv, i, v0 + j], 0.0)
        else:
            for i, j in T.Parallel(R, W):
                s_f[i, j] = T.if_then_else(has_init != 0, h0[n, hv, v0 + j, i], 0.0)

    @T.macro
    def store_state(ht, s_f, n, hv, v0):
        if value_rows and same:
            T.copy(s_f, ht[n, hv, v0:v0 + R, :])
        elif value_rows:
            for i, j in T.Parallel(R, W):
                ht[n, hv, j, v0 + i] = s_f[i, j]
        elif same:
            T.copy(s_f, ht[n, hv, :, v0:v0 + W])
        else:
            for i, j in T.Parallel(R, W):
                ht[n, hv, v0 + j, i] = s_f[i, j]

    return load_state, store_state


def chain_kernel(run_chain, *, heads: int, value_heads: int, dim_k: int, dim_v: int, chunk: int,
                 block_v: int, dtype: str, varlen: bool, state_v_first: bool, threads: int):
    """The prim_func that runs ``run_chain`` (a ``T.macro`` taking q, k, v, tp, m, f, h0, o, ht and
    the CTA's sequence n, value head hv, V tile bv, token bounds bos..eos and has_init).

    Tokens are flattened to [B·T]. Fixed length: ``seq_len`` gives T. Varlen: ``cu_seqlens``
    (int32, [N+1]) bounds the sequences. ``has_init`` (0 or 1) says whether ``h0`` holds an
    initial state; without one, pass any tensor of the state's shape (it is not read).
    Grid: (V / block_v, HV, N).
    """
    H, HV, K, V, C, BV = heads, value_heads, dim_k, dim_v, chunk, block_v
    accum = "float32"
    tokens = T.dynamic("tokens")
    nseq = T.dynamic("nseq")
    state_shape = [nseq, HV, V, K] if state_v_first else [nseq, HV, K, V]

    if varlen:
        @T.prim_func
        def chain(
            q: T.Tensor([tokens, H, K], dtype),
            k: T.Tensor([tokens, H, K], dtype),
            v: T.Tensor([tokens, HV, V], dtype),
            tp: T.Tensor([HV, tokens, C], dtype),
            m: T.Tensor([HV, tokens, C], dtype),
            f: T.Tensor([4, HV, tokens], accum),
            h0: T.Tensor(state_shape, accum),
            cu_seqlens: T.Tensor([nseq + 1], "int32"),
            o: T.Tensor([tokens, HV, V], dtype),
            ht: T.Tensor(state_shape, accum),
            has_init: T.int32,
        ):
            with T.Kernel(V // BV, HV, nseq, threads=threads) as (bv, hv, n):
                run_chain(q, k, v, tp, m, f, h0, o, ht, n, hv, bv, cu_seqlens[n], cu_seqlens[n + 1], has_init)
    else:
        @T.prim_func
        def chain(
            q: T.Tensor([tokens, H, K], dtype),
            k: T.Tensor([tokens, H, K], dtype),
            v: T.Tensor([tokens, HV, V], dtype),
            tp: T.Tensor([HV, tokens, C], dtype),
            m: T.Tensor([HV, tokens, C], dtype),
            f: T.Tensor([4, HV, tokens], accum),
            h0: T.Tensor(state_shape, accum),
            o: T.Tensor([tokens, HV, V], dtype),
            ht: T.Tensor(state_shape, accum),
            seq_len: T.int32,
            has_init: T.int32,
        ):
            with T.Kernel(V // BV, HV, nseq, threads=threads) as (bv, hv, n):
                run_chain(q, k, v, tp, m, f, h0, o, ht, n, hv, bv, n * seq_len, (n + 1) * seq_len, has_init)

    return chain

"""State in and out: the state tile between registers and the initial or final state tensor, in
either of the state's layouts."""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures


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

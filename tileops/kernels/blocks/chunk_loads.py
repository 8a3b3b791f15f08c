"""The loads of one chunk's inputs for the two-pass chain: q, k, the V tile and the first pass's
T', M and row factors (or, under one decay per key channel, its decayed keys and queries and the
segment's decay), into shared tiles."""

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


def channel_chunk_loader(chunk: int, block_v: int, delta: bool = True, values: bool = True, outputs: bool = True):
    """As ``chunk_loader`` under one decay per key channel: Q_o, K_x and K_s of value head hv
    (``chunk_prep_channel``'s), the V tile, T', M and the state's decay over the segment, row
    ``decay_row`` of ``decay``; without ``delta`` neither K_x nor T', without ``values`` no V tile,
    without ``outputs`` neither Q_o nor M."""
    C, BV = chunk, block_v

    @T.macro
    def load_chunk(qo, kx, ks, v, tp, m, decay, q_s, k_s, ku_s, v_s, tp_s, m_s, d_s, t0, decay_row, hv, v0):
        if outputs:
            T.copy(qo[hv, t0:t0 + C, :], q_s)
        if delta:
            T.copy(kx[hv, t0:t0 + C, :], k_s)
        T.copy(ks[hv, t0:t0 + C, :], ku_s)
        if values:
            T.copy(v[t0:t0 + C, hv, v0:v0 + BV], v_s)
        if delta:
            T.copy(tp[hv, t0:t0 + C, :], tp_s)
        if outputs:
            T.copy(m[hv, t0:t0 + C, :], m_s)
        T.copy(decay[hv, decay_row, :], d_s)

    return load_chunk

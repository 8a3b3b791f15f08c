"""Second pass of the GDN prefill with the state held value-major: Sᵀ (block_v × K) in registers.

One CTA per (V tile, value head, sequence) walks its sequence's C-token windows in order, each
by ``chunk_h.walk_step`` (every product takes its left operand from registers; only the output
goes through shared memory), with T', M and the row factors of the first pass. One warpgroup
per 64 value rows. Under one decay per key channel (``channel``) it reads the first pass's decayed
keys and queries and each segment's decay instead of q, k and the row factors (``chunk_h``).
With ``boundaries`` it also stores the state entering each window, then the final one, key-major
in BTHD's order (``chain.chain_kernel``'s ``chunk_major``): the per-chunk states of GLA's
chunked training forward. With ``transition`` (KDA's cut pieces, K = V) each sequence's walk starts
from the identity with v = 0 and writes no output: its final state is the sequence's transition Φ
(``plans.channel_pieces``); v, h0 and o are then not touched. Without ``outputs`` (a cut piece's walk
from zero, whose final state is all its entry needs) the walk neither reads Q_o and M nor forms or
writes o.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.blocks.chunk_h import WARPGROUP_ROWS, walk_step
from tileops.kernels.blocks.chunk_loads import channel_chunk_loader, chunk_loader
from tileops.kernels.blocks.state_io import state_io
from tileops.kernels.plans.tiles import ROW_PAD
from tileops.kernels.programs.chain import chain_kernel


def chain_program(*, heads: int, value_heads: int, dim_k: int, dim_v: int, chunk: int,
                  block_v: int, dtype: str, sequences: str, state_v_first: bool, threads: int,
                  num_stages: int, issue: str = "serial", channel: bool = False, delta: bool = True,
                  boundaries: bool = False, transition: bool = False, outputs: bool = True):
    """The TileLang program of the state pass, specialised on everything but lengths and counts.

    Arguments and grid: ``chain.chain_kernel`` (with its ``channel``), with ``threads`` one warpgroup
    per 64 of the ``block_v`` value rows. ``issue``: how the walk's products wait (``walk_step``).
    """
    H, HV, K, V, C, BV = heads, value_heads, dim_k, dim_v, chunk, block_v
    assert not (boundaries and state_v_first), "boundary states are stored key-major"
    assert threads == 128 * BV // WARPGROUP_ROWS, "one warpgroup per 64 value rows"
    assert not transition or (channel and delta and K == V and not boundaries), "a transition: KDA's, K = V"
    assert outputs or channel, "only the per-channel walk goes without outputs"
    outputs = outputs and not transition
    group = HV // H
    accum = "float32"
    load_chunk = chunk_loader(C, BV)
    load_channel_chunk = channel_chunk_loader(C, BV, delta, values=not transition, outputs=outputs)
    step, store_output = walk_step(rows=BV, dim_k=K, chunk=C, dtype=dtype, issue=issue, outputs=outputs,
                                   channel=channel, delta=delta)
    load_state, store_state = state_io(value_rows=True, rows=BV, cols=K, state_v_first=state_v_first)

    @T.macro
    def store_boundary(hs, s_f, n, c, hv, v0):
        """Sᵀ (the tile's value rows) into boundary c of sequence n, key-major."""
        for i, j in T.Parallel(BV, K):
            hs[n, c, hv, j, v0 + i] = s_f[i, j]

    @T.macro
    def run_chain(q, k, ku, v, tp, m, f, h0, o, ht, hs, n, hv, bv, bos, eos, has_init):
        h = hv // group
        v0 = bv * BV
        # One stage of the tiles walk_step reads (the pipeline adds its own).
        q_s = T.alloc_shared([1, C, K], dtype) if outputs else None
        k_s = T.alloc_shared([1, C, K], dtype) if delta else None  # no K_x without the delta rule
        v_s = T.alloc_shared([1, C, BV + ROW_PAD], dtype)
        tp_s = T.alloc_shared([1, C, C], dtype) if delta else None
        m_s = T.alloc_shared([1, C, C], dtype) if outputs else None
        f_s = T.alloc_shared([1, K] if channel else [1, 4, C], accum)  # the decays of the state's columns, or the row factors
        o_s = T.alloc_shared([1, C, BV + ROW_PAD], dtype) if outputs else None
        s_f = T.alloc_fragment([BV, K], accum)
        o_f = T.alloc_fragment([BV, C], accum)
        if channel:
            ku_s = T.alloc_shared([1, C, K], dtype)

        if transition:  # Sᵀ = I, and v = 0 throughout
            for i, j in T.Parallel(BV, K):
                s_f[i, j] = T.if_then_else(v0 + i == j, 1.0, 0.0)
            T.clear(v_s)
        else:
            load_state(h0, s_f, n, hv, v0, has_init)
        w0 = bos // C
        windows = T.if_then_else(eos > bos, T.ceildiv(eos, C) - w0, 0)
        for c in T.Pipelined(windows, num_stages=num_stages):
            t0 = (w0 + c) * C
            if channel:
                # The segment ending the sequence in this window has its own decay row, after the windows'.
                row = T.if_then_else(eos <= t0 + C, T.ceildiv(q.shape[1], C) + n, w0 + c)
                load_channel_chunk(q, k, ku, v, tp, m, f, q_s[0, :, :] if outputs else None,
                                   k_s[0, :, :] if delta else None, ku_s[0, :, :], v_s[0, :, 0:BV],
                                   tp_s[0, :, :] if delta else None, m_s[0, :, :] if outputs else None, f_s[0, :], t0,
                                   row, hv, v0)
            else:
                load_chunk(q, k, v, tp, m, f, q_s[0, :, :], k_s[0, :, :], v_s[0, :, 0:BV], tp_s[0, :, :], m_s[0, :, :],
                           f_s[0, :, :], t0, h, hv, v0)
            lo = T.max(bos - t0, 0)
            hi = T.min(eos - t0, C)
            if boundaries:
                store_boundary(hs, s_f, n, c, hv, v0)
            if channel:
                step(q_s, k_s, ku_s, v_s, tp_s, m_s, f_s, 0, 0, lo, hi, s_f, o_f)
            else:
                step(q_s, k_s, v_s, tp_s, m_s, f_s, 0, 0, lo, hi, s_f, o_f)
            if outputs:
                store_output(o_f, o_s, 0, o, t0, hv, v0, lo, hi)
        store_state(ht, s_f, n, hv, v0)
        if boundaries:
            store_boundary(hs, s_f, n, windows, hv, v0)

    return chain_kernel(run_chain, heads=H, value_heads=HV, dim_k=K, dim_v=V, chunk=C, block_v=BV, dtype=dtype,
                        sequences=sequences, state_v_first=state_v_first, threads=threads, channel=channel,
                        delta=delta, boundaries=boundaries, chunk_major=boundaries)

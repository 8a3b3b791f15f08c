"""Second pass of the GDN prefill, key-major: the state chain and the outputs, chunk by chunk.

One CTA per (V tile, value head, sequence) walks the C-token windows that its sequence touches,
in order, with the state tile S (K × block_v, fp32) in registers; rows of a window outside the
sequence are masked. With T', M and the row factors f_x, f_o, f_s, f_c from the first pass, a
chunk costs five tensor-core products and no transcendental:

    Δ = T' (V − diag(f_x) K S)           (the chunk's δ's)
    O = diag(f_o) Q S + M Δ
    S = f_c S + Kᵀ diag(f_s) Δ

Columns of V never interact, so V tiles multiply the CTAs of the chain.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.blocks.chunk_loads import chunk_loader
from tileops.kernels.blocks.state_io import state_io
from tileops.kernels.plans.tiles import ROW_PAD
from tileops.kernels.programs.chain import chain_kernel


def chain_program(*, heads: int, value_heads: int, dim_k: int, dim_v: int, chunk: int,
                  block_v: int, dtype: str, sequences: str, state_v_first: bool, threads: int,
                  num_stages: int, boundaries: bool = False):
    """The TileLang program of the state pass, specialised on everything but lengths and counts.

    Arguments and grid: ``chain.chain_kernel``; ``boundaries`` (key-major [.., K, V] states only)
    also stores the state at every chunk boundary.
    """
    assert not (boundaries and state_v_first), "boundary states are stored key-major"
    H, HV, K, V, C, BV = heads, value_heads, dim_k, dim_v, chunk, block_v
    group = HV // H
    accum = "float32"
    load_chunk = chunk_loader(C, BV)
    load_state, store_state = state_io(value_rows=False, rows=K, cols=BV, state_v_first=state_v_first)

    @T.macro
    def run_chain(q, k, ku, v, tp, m, f, h0, o, ht, hs, n, hv, bv, bos, eos, has_init):  # ku: no update keys
        h = hv // group
        v0 = bv * BV
        q_s = T.alloc_shared([C, K], dtype)
        k_s = T.alloc_shared([C, K], dtype)
        v_s = T.alloc_shared([C, BV + ROW_PAD], dtype)
        tp_s = T.alloc_shared([C, C], dtype)
        m_s = T.alloc_shared([C, C], dtype)
        f_s = T.alloc_shared([4, C], accum)
        s_f = T.alloc_fragment([K, BV], accum)
        s_s = T.alloc_shared([K, BV], dtype)
        ks_f = T.alloc_fragment([C, BV], accum)
        x_s = T.alloc_shared([C, BV], dtype)
        d_f = T.alloc_fragment([C, BV], accum)
        d_s = T.alloc_shared([C, BV], dtype)
        dk_s = T.alloc_shared([C, BV], dtype)
        o_f = T.alloc_fragment([C, BV], accum)
        o_s = T.alloc_shared([C, BV + ROW_PAD], dtype)

        load_state(h0, s_f, n, hv, v0, has_init)
        T.copy(s_f, s_s)
        w0 = bos // C
        windows = T.if_then_else(eos > bos, T.ceildiv(eos, C) - w0, 0)
        for c in T.Pipelined(windows, num_stages=num_stages):
            t0 = (w0 + c) * C
            load_chunk(q, k, v, tp, m, f, q_s, k_s, v_s[0:C, 0:BV], tp_s, m_s, f_s, t0, h, hv, v0)
            lo = T.max(bos - t0, 0)
            hi = T.min(eos - t0, C)
            if boundaries:
                T.copy(s_f, hs[n, hv, c, :, v0:v0 + BV])

            T.gemm(k_s, s_s, ks_f, clear_accum=True)
            for i, j in T.Parallel(C, BV):
                x_s[i, j] = T.if_then_else(lo <= i and i < hi, v_s[i, j] - f_s[0, i] * ks_f[i, j], 0.0)
            T.gemm(tp_s, x_s, d_f, clear_accum=True)
            for i, j in T.Parallel(C, BV):
                d_s[i, j] = T.if_then_else(lo <= i and i < hi, d_f[i, j], 0.0)
                dk_s[i, j] = T.if_then_else(lo <= i and i < hi, d_f[i, j] * f_s[2, i], 0.0)
            T.gemm(q_s, s_s, o_f, clear_accum=True)
            for i, j in T.Parallel(C, BV):
                o_f[i, j] = o_f[i, j] * f_s[1, i]
            T.gemm(m_s, d_s, o_f)
            for i, j in T.Parallel(K, BV):
                s_f[i, j] = s_f[i, j] * f_s[3, hi - 1]
            T.gemm(k_s, dk_s, s_f, transpose_A=True)
            T.copy(s_f, s_s)
            T.copy(o_f, o_s[0:C, 0:BV])
            for i, j in T.Parallel(C, BV):
                if lo <= i and i < hi:
                    o[t0 + i, hv, v0 + j] = o_s[i, j]
        store_state(ht, s_f, n, hv, v0)
        if boundaries:
            T.copy(s_f, hs[n, hv, windows, :, v0:v0 + BV])

    return chain_kernel(run_chain, heads=H, value_heads=HV, dim_k=K, dim_v=V, chunk=C, block_v=BV, dtype=dtype,
                        sequences=sequences, state_v_first=state_v_first, threads=threads, boundaries=boundaries)

"""Second pass of the GDN prefill with the state held value-major: Sᵀ (block_v × K) in registers.

Every product of the chunk then takes its left operand from registers (wgmma's register-A
form), so the state, X and Δ never go through shared memory; only the output does, transposed
on its way to whole-row stores. One warpgroup per 64 value rows. With T', M and the row factors
of the first pass, per chunk (columns of the tiles are the chunk's tokens, those outside the
sequence masked):

    Xᵀ = Vᵀ − (Sᵀ Kᵀ) diag(f_x)        Δᵀ = Xᵀ T'ᵀ
    Oᵀ = (Sᵀ Qᵀ) diag(f_o) + Δᵀ Mᵀ
    Sᵀ = f_c Sᵀ + (Δᵀ diag(f_s)) K
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.gdn.chain_entry import chain_kernel, chunk_loader
from tileops.kernels.gdn.prefill import ROW_PAD

WARPGROUP_ROWS = 64  # value rows one warpgroup's wgmma covers
ROWS = T.GemmWarpPolicy.FullRow  # each warpgroup keeps its own value rows in every product


def chain_program(*, heads: int, value_heads: int, dim_k: int, dim_v: int, chunk: int,
                  block_v: int, dtype: str, varlen: bool, state_v_first: bool, threads: int,
                  num_stages: int, min_blocks: int = 1):
    """The TileLang program of the state pass, specialised on everything but lengths and counts.

    Arguments and grid: ``chain_entry.chain_kernel``, with ``threads`` one warpgroup per 64 of
    the ``block_v`` value rows.
    """
    H, HV, K, V, C, BV = heads, value_heads, dim_k, dim_v, chunk, block_v
    assert threads == 128 * BV // WARPGROUP_ROWS, "one warpgroup per 64 value rows"
    group = HV // H
    accum = "float32"
    load_chunk = chunk_loader(C, BV)

    @T.macro
    def run_chain(q, k, v, tp, m, f, h0, o, ht, n, hv, bv, bos, eos, has_init):
        h = hv // group
        v0 = bv * BV
        q_s = T.alloc_shared([C, K], dtype)
        k_s = T.alloc_shared([C, K], dtype)
        v_s = T.alloc_shared([C, BV + ROW_PAD], dtype)
        tp_s = T.alloc_shared([C, C], dtype)
        m_s = T.alloc_shared([C, C], dtype)
        f_s = T.alloc_shared([4, C], accum)
        o_s = T.alloc_shared([C, BV + ROW_PAD], dtype)
        s_f = T.alloc_fragment([BV, K], accum)
        s_a = T.alloc_fragment([BV, K], dtype)
        ks_f = T.alloc_fragment([BV, C], accum)
        o_f = T.alloc_fragment([BV, C], accum)
        x_a = T.alloc_fragment([BV, C], dtype)
        d_f = T.alloc_fragment([BV, C], accum)
        d_a = T.alloc_fragment([BV, C], dtype)
        dk_a = T.alloc_fragment([BV, C], dtype)
        if min_blocks > 1:
            T.annotate_min_blocks_per_sm(min_blocks)

        if state_v_first:
            for i, j in T.Parallel(BV, K):
                s_f[i, j] = T.if_then_else(has_init != 0, h0[n, hv, v0 + i, j], 0.0)
        else:
            for i, j in T.Parallel(BV, K):
                s_f[i, j] = T.if_then_else(has_init != 0, h0[n, hv, j, v0 + i], 0.0)
        w0 = bos // C
        windows = T.if_then_else(eos > bos, T.ceildiv(eos, C) - w0, 0)
        for c in T.Pipelined(windows, num_stages=num_stages):
            t0 = (w0 + c) * C
            load_chunk(q, k, v, tp, m, f, q_s, k_s, v_s, tp_s, m_s, f_s, t0, h, hv, v0)
            lo = T.max(bos - t0, 0)
            hi = T.min(eos - t0, C)

            T.copy(s_f, s_a)
            T.gemm(s_a, k_s, ks_f, transpose_B=True, clear_accum=True, policy=ROWS)
            T.gemm(s_a, q_s, o_f, transpose_B=True, clear_accum=True, policy=ROWS)
            for i, j in T.Parallel(BV, C):
                x_a[i, j] = T.if_then_else(lo <= j and j < hi, v_s[j, i] - f_s[0, j] * ks_f[i, j], 0.0)
            T.gemm(x_a, tp_s, d_f, transpose_B=True, clear_accum=True, policy=ROWS)
            for i, j in T.Parallel(BV, C):
                d_a[i, j] = T.if_then_else(lo <= j and j < hi, d_f[i, j], 0.0)
                dk_a[i, j] = T.if_then_else(lo <= j and j < hi, d_f[i, j] * f_s[2, j], 0.0)
                o_f[i, j] = o_f[i, j] * f_s[1, j]
            T.gemm(d_a, m_s, o_f, transpose_B=True, policy=ROWS)
            for i, j in T.Parallel(BV, K):
                s_f[i, j] = s_f[i, j] * f_s[3, hi - 1]
            T.gemm(dk_a, k_s, s_f, policy=ROWS)
            for i, j in T.Parallel(BV, C):
                o_s[j, i] = o_f[i, j]
            for i, j in T.Parallel(C, BV):
                if lo <= i and i < hi:
                    o[t0 + i, hv, v0 + j] = o_s[i, j]
        if state_v_first:
            T.copy(s_f, ht[n, hv, v0:v0 + BV, :])
        else:
            for i, j in T.Parallel(BV, K):
                ht[n, hv, j, v0 + i] = s_f[i, j]

    return chain_kernel(run_chain, heads=H, value_heads=HV, dim_k=K, dim_v=V, chunk=C, block_v=BV, dtype=dtype,
                        varlen=varlen, state_v_first=state_v_first, threads=threads)

"""The backward's gradients of every chunk at once: dq, dk, dv and dβ, from the forward's boundary
states and WY factors and the state walk's dS' and dΔ (``chunk_dh``).

Per chunk, with S the state it starts at, A⁻ = (I + A)⁻¹ its WY inverse (A = strictly lower
β_i k_i·k_j), w = A⁻(β ⊙ K), u = A⁻(β ⊙ V), Δ = u − w S recomputed, P = lower (dO Δᵀ):

    dQ = dO Sᵀ + P K                dK = Pᵀ Q + Δ dS'ᵀ + (through w and A, below)
    dW = −dΔ Sᵀ                     dU = dΔ

and the WY backward, through w and u into K, V, β and A⁻, then A:

    dK += β ⊙ A⁻ᵀ dW      dV = β ⊙ A⁻ᵀ dU      dβ = Σ_j (A⁻ᵀ dW ⊙ K + A⁻ᵀ dU ⊙ V)
    dA⁻ = lower (dW (β ⊙ K)ᵀ + dU (β ⊙ V)ᵀ)     dA = −strictly lower (A⁻ᵀ dA⁻ A⁻ᵀ)
    G = diag(β) dA:   dK += G K + Gᵀ K          dβ += Σ_j dA ⊙ K Kᵀ

One CTA (two warpgroups) per (chunk, sequence), the whole K × V state: nothing is summed across
CTAs. Shared tiles are reused once their last reader has run (w's for dW, u's for β ⊙ V, q's
for β ⊙ K, P's for dA⁻ and then G), which keeps K = V = 128 in 216 KB.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

THREADS = 256


def grads_program(*, dim_k: int, dim_v: int, chunk: int, dtype: str):
    """The TileLang program: q, k, w [walks, length, K], v, u, do, dv_new [walks, length, V] and
    a_inv [walks, length, C] in the token dtype, beta [walks, length] in fp32, the forward's states
    h [walks, length / C + 1, K, V] in fp32 and the walk's dh [walks, length / C, K, V]; outputs dq,
    dk [walks, length, K], dv [walks, length, V] in the token dtype and dbeta [walks, length] in
    fp32. Grid: (length / C, walks)."""
    K, V, C = dim_k, dim_v, chunk
    accum = "float32"
    walks, length = T.dynamic("walks"), T.dynamic("length")
    chunks, bounds = T.dynamic("chunks"), T.dynamic("bounds")

    @T.prim_func
    def chunk_grads(
        q: T.Tensor([walks, length, K], dtype),
        k: T.Tensor([walks, length, K], dtype),
        v: T.Tensor([walks, length, V], dtype),
        beta: T.Tensor([walks, length], accum),
        a_inv: T.Tensor([walks, length, C], dtype),
        w: T.Tensor([walks, length, K], dtype),
        u: T.Tensor([walks, length, V], dtype),
        do: T.Tensor([walks, length, V], dtype),
        h: T.Tensor([walks, bounds, K, V], accum),
        dh: T.Tensor([walks, chunks, K, V], dtype),
        dv_new: T.Tensor([walks, length, V], dtype),
        dq: T.Tensor([walks, length, K], dtype),
        dk: T.Tensor([walks, length, K], dtype),
        dv: T.Tensor([walks, length, V], dtype),
        dbeta: T.Tensor([walks, length], accum),
    ):
        with T.Kernel(chunks, walks, threads=THREADS) as (c, n):
            t0 = c * C
            q_s = T.alloc_shared([C, K], dtype)  # then β ⊙ K
            k_s = T.alloc_shared([C, K], dtype)
            w_s = T.alloc_shared([C, K], dtype)  # then dW
            v_s = T.alloc_shared([C, V], dtype)
            u_s = T.alloc_shared([C, V], dtype)  # then β ⊙ V
            do_s = T.alloc_shared([C, V], dtype)
            du_s = T.alloc_shared([C, V], dtype)
            d_s = T.alloc_shared([C, V], dtype)
            h_s = T.alloc_shared([K, V], dtype)
            dh_s = T.alloc_shared([K, V], dtype)
            a_s = T.alloc_shared([C, C], dtype)
            p_s = T.alloc_shared([C, C], dtype)  # P, then dA⁻, then G
            t_s = T.alloc_shared([C, C], dtype)
            b_s = T.alloc_shared([C], accum)
            ck_f = T.alloc_fragment([C, K], accum)
            cv_f = T.alloc_fragment([C, V], accum)
            dk_f = T.alloc_fragment([C, K], accum)
            cc_f = T.alloc_fragment([C, C], accum)
            kk_f = T.alloc_fragment([C, C], accum)
            db_f = T.alloc_fragment([C], accum)
            part_f = T.alloc_fragment([C], accum)

            T.copy(q[n, t0:t0 + C, :], q_s)
            T.copy(k[n, t0:t0 + C, :], k_s)
            T.copy(w[n, t0:t0 + C, :], w_s)
            T.copy(v[n, t0:t0 + C, :], v_s)
            T.copy(u[n, t0:t0 + C, :], u_s)
            T.copy(do[n, t0:t0 + C, :], do_s)
            T.copy(dv_new[n, t0:t0 + C, :], du_s)
            T.copy(dh[n, c, :, :], dh_s)
            T.copy(a_inv[n, t0:t0 + C, :], a_s)
            T.copy(beta[n, t0:t0 + C], b_s)
            for i, j in T.Parallel(K, V):
                h_s[i, j] = h[n, c, i, j]

            # Δ = u − w S
            T.gemm(w_s, h_s, cv_f, clear_accum=True)
            for i, j in T.Parallel(C, V):
                d_s[i, j] = u_s[i, j] - cv_f[i, j]
            # dQ = dO Sᵀ + P K
            T.gemm(do_s, h_s, ck_f, transpose_B=True, clear_accum=True)
            T.gemm(do_s, d_s, cc_f, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(C, C):
                p_s[i, j] = T.if_then_else(j <= i, cc_f[i, j], 0.0)
            T.gemm(p_s, k_s, ck_f)
            T.copy(ck_f, dq[n, t0:t0 + C, :])
            # dK = Pᵀ Q + Δ dS'ᵀ
            T.gemm(p_s, q_s, dk_f, transpose_A=True, clear_accum=True)
            T.gemm(d_s, dh_s, dk_f, transpose_B=True)
            # dW = −dΔ Sᵀ, over w's tile; β ⊙ K and β ⊙ V over q's and u's
            T.gemm(du_s, h_s, ck_f, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(C, K):
                w_s[i, j] = -ck_f[i, j]
                q_s[i, j] = b_s[i] * k_s[i, j]
            for i, j in T.Parallel(C, V):
                u_s[i, j] = b_s[i] * v_s[i, j]
            # through w: dK += β ⊙ A⁻ᵀ dW, dβ = Σ A⁻ᵀ dW ⊙ K
            T.gemm(a_s, w_s, ck_f, transpose_A=True, clear_accum=True)
            for i, j in T.Parallel(C, K):
                dk_f[i, j] = dk_f[i, j] + b_s[i] * ck_f[i, j]
                ck_f[i, j] = ck_f[i, j] * k_s[i, j]
            T.reduce_sum(ck_f, db_f, dim=1)
            # through u: dV = β ⊙ A⁻ᵀ dU, dβ += Σ A⁻ᵀ dU ⊙ V
            T.gemm(a_s, du_s, cv_f, transpose_A=True, clear_accum=True)
            for i, j in T.Parallel(C, V):
                dv[n, t0 + i, j] = b_s[i] * cv_f[i, j]
                cv_f[i, j] = cv_f[i, j] * v_s[i, j]
            T.reduce_sum(cv_f, part_f, dim=1)
            for i in T.Parallel(C):
                db_f[i] = db_f[i] + part_f[i]
            # dA⁻ = lower (dW (β ⊙ K)ᵀ + dU (β ⊙ V)ᵀ); dA = −strictly lower (A⁻ᵀ dA⁻ A⁻ᵀ)
            T.gemm(w_s, q_s, cc_f, transpose_B=True, clear_accum=True)
            T.gemm(du_s, u_s, cc_f, transpose_B=True)
            for i, j in T.Parallel(C, C):
                p_s[i, j] = T.if_then_else(j <= i, cc_f[i, j], 0.0)
            T.gemm(a_s, p_s, cc_f, transpose_A=True, clear_accum=True)
            T.copy(cc_f, t_s)
            T.gemm(t_s, a_s, cc_f, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(C, C):
                cc_f[i, j] = T.if_then_else(j < i, -cc_f[i, j], 0.0)
            # dβ += Σ dA ⊙ K Kᵀ; dK += G K + Gᵀ K
            T.gemm(k_s, k_s, kk_f, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(C, C):
                p_s[i, j] = b_s[i] * cc_f[i, j]
                kk_f[i, j] = kk_f[i, j] * cc_f[i, j]
            T.reduce_sum(kk_f, part_f, dim=1)
            for i in T.Parallel(C):
                db_f[i] = db_f[i] + part_f[i]
            T.gemm(p_s, k_s, dk_f)
            T.gemm(p_s, k_s, dk_f, transpose_A=True)
            T.copy(dk_f, dk[n, t0:t0 + C, :])
            for i in T.Parallel(C):
                dbeta[n, t0 + i] = db_f[i]

    return chunk_grads

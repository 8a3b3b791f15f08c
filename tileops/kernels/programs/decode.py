"""The TileLang program of one decode step (T == 1) of every family: the delta rule or a plain
gated sum, under no gate, one decay per head or one per key channel.

One CTA updates one V-tile of one (sequence, value head) state. Each thread keeps its piece of
the state tile in fp32 registers, so the state is read once and written once. One reduction over
K gives Sᵀk, Sᵀq and the scalars kᵀk, qᵀq, qᵀk at once; with them the L2 norms, the decay, the
delta and the output need no second pass. With D the decay (e^g for a head's gate, diag(e^g)
for per-channel gates, I for none; a per-channel decay is applied to the state first):

    delta rule:  δ = β (v − (D S)ᵀk̂),   o = scale ((D S)ᵀq̂ + (q̂ᵀk̂) δ),   S_new = D S + k̂ δᵀ
    gated sum:   δ = v,                 o = scale ((D S)ᵀq  + (qᵀk) v),    S_new = D S + k vᵀ

Threads tile the state with 16-byte vectors along its contiguous axis (V for the key-major
layout, K for the value-major one) and contiguous runs along the other axis. Plain SIMT fp32
code: it runs on sm80, sm89 and sm90 alike.
"""

import tilelang.language as T

from tileops.kernels.blocks.transforms import channel_gate_transform, gate_transform
from tileops.kernels.hardware import VEC, WARP
from tileops.kernels.plans.decode_tile import DecodeShape, thread_tile


def decode_program(s: DecodeShape):
    """The prim_func: (q, k, v, g, beta, h0, A_log, dt_bias, o, ht), batch size symbolic.

    ``h0`` is not read when ``s.has_state`` is False. Without ``s.gate_in_kernel``, ``A_log`` and
    ``dt_bias`` are not read either and take the shape of the state, so the launcher can pass it.
    Without a gate, ``g`` takes beta's shape; without the delta rule, ``beta`` takes g's; without
    ``s.has_dt_bias``, ``dt_bias`` takes A_log's: the launcher passes those in their place.
    """
    K, V, H, HV, BV = s.dim_k, s.dim_v, s.heads, s.value_heads, s.block_v
    tile = thread_tile(K, BV, s.threads, s.state_v_first)
    EK, EV, TK = tile.ek, tile.ev, tile.tk
    group = HV // H
    batch = T.dynamic("batch")
    state_shape = (batch, HV, V, K) if s.state_v_first else (batch, HV, K, V)
    gate_shape = (HV,) if s.gate_in_kernel else state_shape
    channel = s.gate == "channel"
    g_shape = (batch, 1, HV, K) if channel else (batch, 1, HV)
    beta_shape = (batch, 1, HV) if s.delta else g_shape
    bias_shape = (HV * K,) if channel and s.gate_in_kernel and s.has_dt_bias else gate_shape
    warps_k = max(1, (TK * tile.k_stride) // WARP)  # warps a column set spans
    # shuffle distances inside a warp that reach the other K-pieces of the same columns
    lane_steps = []
    step = tile.k_stride
    while step < WARP and step < TK * tile.k_stride:
        lane_steps.append(step)
        step *= 2
    n_dots = 3 if s.l2norm else 1  # qᵀk, then kᵀk and qᵀq for the norms
    n_red = 2 * EV + n_dots  # a thread's Sᵀk and Sᵀq cells, then the dots
    n_cross = 2 * BV + n_dots  # the same for all of a warp's columns
    eps = 1e-6
    f32 = "float32"

    def k_pos(tk, a):
        """K index of a thread's a-th K cell."""
        if s.state_v_first:
            return ((a // VEC) * TK + tk) * VEC + a % VEC
        return tk * EK + a

    def v_pos(tv, c):
        """V index (inside the tile) of a thread's c-th V cell."""
        return tv * EV + c

    def cell(a, c):
        """Register index of state cell (a, c): the contiguous axis runs fastest."""
        return c * EK + a if s.state_v_first else a * EV + c

    k_run = VEC if s.state_v_first else min(EK, 8)  # contiguous K cells per q/k access

    def widen(x):
        """A stored state cell as fp32."""
        return x if s.state_dtype == f32 else T.cast(x, f32)

    def narrow(x):
        """An fp32 state cell as stored."""
        return x if s.state_dtype == f32 else T.cast(x, s.state_dtype)

    def channel_gate(x, a_log):
        """A per-channel log decay from the raw gate x (dt_bias added): ``channel_gate_transform``."""
        return channel_gate_transform(x, a_log, s.lower_bound)

    @T.prim_func
    def main(
        q: T.Tensor((batch, 1, H, K), s.dtype),
        k: T.Tensor((batch, 1, H, K), s.dtype),
        v: T.Tensor((batch, 1, HV, V), s.dtype),
        g: T.Tensor(g_shape, s.g_dtype),
        beta: T.Tensor(beta_shape, s.beta_dtype),
        h0: T.Tensor(state_shape, s.state_dtype),
        A_log: T.Tensor(gate_shape, s.a_log_dtype),
        dt_bias: T.Tensor(bias_shape, s.dt_bias_dtype),
        o: T.Tensor((batch, 1, HV, V), s.dtype),
        ht: T.Tensor(state_shape, s.state_dtype),
    ):
        with T.Kernel(V // BV, HV, batch, threads=s.threads) as (iv, ih, ib):
            tx = T.get_thread_binding()
            hk = ih // group
            v0 = iv * BV
            tk = (tx // tile.k_stride) % TK
            tv = tx // TK if s.state_v_first else tx % tile.tv

            st = T.alloc_local((EK * EV,), f32)
            qf = T.alloc_local((EK,), f32)
            kf = T.alloc_local((EK,), f32)
            vf = T.alloc_local((EV,), f32)
            red = T.alloc_local((n_red,), f32)

            # the state tile first: its loads are the long pole
            if s.has_state:
                if s.state_v_first:
                    for c in T.unroll(EV):
                        for a4 in T.unroll(EK // VEC):
                            for e in T.vectorized(VEC):
                                st[cell(a4 * VEC + e, c)] = widen(h0[ib, ih, v0 + v_pos(tv, c), k_pos(tk, a4 * VEC + e)])
                else:
                    for a in T.unroll(EK):
                        for c in T.vectorized(EV):
                            st[cell(a, c)] = widen(h0[ib, ih, k_pos(tk, a), v0 + v_pos(tv, c)])
            else:
                for i in T.unroll(EK * EV):
                    st[i] = 0.0

            for a0 in T.unroll(EK // k_run):
                for e in T.vectorized(k_run):
                    qf[a0 * k_run + e] = T.cast(q[ib, 0, hk, k_pos(tk, a0 * k_run + e)], f32)
                for e in T.vectorized(k_run):
                    kf[a0 * k_run + e] = T.cast(k[ib, 0, hk, k_pos(tk, a0 * k_run + e)], f32)
            for c in T.unroll(EV):
                vf[c] = T.cast(v[ib, 0, ih, v0 + v_pos(tv, c)], f32)
            if channel:  # D S first: the reduction and the update see the decayed state
                df = T.alloc_local((EK,), f32)
                for a0 in T.unroll(EK // k_run):
                    for e in T.vectorized(k_run):
                        df[a0 * k_run + e] = T.cast(g[ib, 0, ih, k_pos(tk, a0 * k_run + e)], f32)
                for a in T.unroll(EK):
                    if s.gate_in_kernel:
                        if s.has_dt_bias:
                            df[a] = df[a] + T.cast(dt_bias[ih * K + k_pos(tk, a)], f32)
                        df[a] = channel_gate(df[a], T.cast(A_log[ih], f32))
                    df[a] = T.exp(df[a])
                    for c in T.unroll(EV):
                        st[cell(a, c)] = df[a] * st[cell(a, c)]

            for i in T.unroll(n_red):
                red[i] = 0.0
            for a in T.unroll(EK):
                for c in T.unroll(EV):
                    red[c] += kf[a] * st[cell(a, c)]
                    red[EV + c] += qf[a] * st[cell(a, c)]
                red[2 * EV] += qf[a] * kf[a]
                if s.l2norm:
                    red[2 * EV + 1] += kf[a] * kf[a]
                    red[2 * EV + 2] += qf[a] * qf[a]
            for d in T.unroll(len(lane_steps)):
                for i in T.unroll(n_red):
                    red[i] += T.shfl_xor(red[i], tile.k_stride << d)
            if warps_k > 1:
                cross = T.alloc_shared((warps_k, n_cross), f32)
                warp = tx // WARP
                if (tx % WARP) // tile.k_stride == 0:
                    for c in T.unroll(EV):
                        cross[warp, v_pos(tv, c)] = red[c]
                        cross[warp, BV + v_pos(tv, c)] = red[EV + c]
                    if tv == 0:
                        for j in T.unroll(n_dots):
                            cross[warp, 2 * BV + j] = red[2 * EV + j]
                T.sync_threads()
                for c in T.unroll(EV):
                    red[c] = 0.0
                    red[EV + c] = 0.0
                    for w in T.unroll(warps_k):
                        red[c] += cross[w, v_pos(tv, c)]
                        red[EV + c] += cross[w, BV + v_pos(tv, c)]
                for j in T.unroll(n_dots):
                    red[2 * EV + j] = 0.0
                    for w in T.unroll(warps_k):
                        red[2 * EV + j] += cross[w, 2 * BV + j]

            if s.gate == "scalar":
                g_in = T.cast(g[ib, 0, ih], f32)
                decay = T.exp(gate_transform(g_in, T.cast(A_log[ih], f32), T.cast(dt_bias[ih], f32)) if s.gate_in_kernel else g_in)
                b_in = T.cast(beta[ib, 0, ih], f32)
                b = T.sigmoid(b_in) * (2.0 if s.neg_eigval else 1.0) if s.beta_sigmoid else b_in
                rk = T.rsqrt(red[2 * EV + 1] + eps) if s.l2norm else T.float32(1.0)
                rq = T.rsqrt(red[2 * EV + 2] + eps) if s.l2norm else T.float32(1.0)
                qk = red[2 * EV] * rk * rq * s.scale
                # vf becomes δ, red[EV + c] the output
                for c in T.unroll(EV):
                    vf[c] = b * (vf[c] - decay * rk * red[c])
                    red[EV + c] = decay * rq * s.scale * red[EV + c] + qk * vf[c]
                for a in T.unroll(EK):
                    kf[a] = kf[a] * rk
                    for c in T.unroll(EV):
                        st[cell(a, c)] = decay * st[cell(a, c)] + kf[a] * vf[c]
            else:  # no decay left to apply: none, or per channel and already in the state
                rk = T.rsqrt(red[2 * EV + 1] + eps) if s.l2norm else T.float32(1.0)
                rq = T.rsqrt(red[2 * EV + 2] + eps) if s.l2norm else T.float32(1.0)
                qk = red[2 * EV] * rk * rq * s.scale
                if s.delta:
                    b_in = T.cast(beta[ib, 0, ih], f32)
                    b = T.sigmoid(b_in) * (2.0 if s.neg_eigval else 1.0) if s.beta_sigmoid else b_in
                    for c in T.unroll(EV):
                        vf[c] = b * (vf[c] - rk * red[c])
                for c in T.unroll(EV):
                    red[EV + c] = rq * s.scale * red[EV + c] + qk * vf[c]
                for a in T.unroll(EK):
                    kf[a] = kf[a] * rk
                    for c in T.unroll(EV):
                        st[cell(a, c)] = st[cell(a, c)] + kf[a] * vf[c]

            if s.state_v_first:
                for c in T.unroll(EV):
                    for a4 in T.unroll(EK // VEC):
                        for e in T.vectorized(VEC):
                            ht[ib, ih, v0 + v_pos(tv, c), k_pos(tk, a4 * VEC + e)] = narrow(st[cell(a4 * VEC + e, c)])
            else:
                for a in T.unroll(EK):
                    for c in T.vectorized(EV):
                        ht[ib, ih, k_pos(tk, a), v0 + v_pos(tv, c)] = narrow(st[cell(a, c)])
            if tk == 0:
                for c in T.unroll(EV):
                    o[ib, 0, ih, v0 + v_pos(tv, c)] = T.cast(red[EV + c], s.dtype)

    return main

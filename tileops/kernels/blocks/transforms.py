"""Input transforms of a chunk's tokens, applied in the kernel: GDN's gate from A_log and dt_bias,
β through a sigmoid (doubled for negative eigenvalues), and the L2 norms' row factors of q and k.

A log decay of −inf is a full reset. Summed into a chunk's cumulative decay it would meet another
−inf as −inf − (−inf) = NaN, so the chunked programs take every log decay no lower than
``LOG_DECAY_FLOOR``: e^-104 is below half of fp32's smallest subnormal, so the decay across the
floored token is exactly 0 while every difference of cumulative sums stays finite.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

LOG_DECAY_FLOOR = -104.0


def log_softplus(x):
    """log(softplus(x)), finite where softplus itself underflows: x below -20, log x above 20."""
    return T.if_then_else(x < -20.0, x, T.if_then_else(x > 20.0, T.log(x), T.log(T.log1p(T.exp(x)))))


def gate_transform(raw, a_log, dt_bias):
    """GDN's gate in kernel, -exp(A_log) * softplus(raw + dt_bias), formed as
    -exp(A_log + log softplus(...)) so that a huge A_log never meets an underflowed softplus as
    inf * 0 = NaN: finite, or -inf (a full reset)."""
    return -T.exp(a_log + log_softplus(raw + dt_bias))


def channel_gate_transform(x, a_log, lower_bound):
    """KDA's gate in kernel for one key channel, from the raw gate x (dt_bias added), never NaN:
    with ``lower_bound`` (a Python float) lb·sigmoid(e^A_log x), a zero x staying zero even for an
    infinite e^A_log; else −exp(A_log + log softplus(x)), finite or −inf (a full reset)."""
    if lower_bound is not None:
        return lower_bound * T.sigmoid(T.if_then_else(x == 0.0, 0.0, T.exp(a_log) * x))
    return -T.exp(a_log + log_softplus(x))


def input_transforms(*, gate_in_kernel: bool, beta_sigmoid: bool, neg_eigval: bool):
    """A macro that writes one token's gate and step size, transformed as the flags say, into
    row ``row`` of ``g_s`` and ``b_s``; the gate no lower than ``LOG_DECAY_FLOOR``."""

    @T.macro
    def transform(raw_g, raw_b, a_log, dt_bias, hv, g_s, b_s, row):
        if gate_in_kernel:
            g_s[row] = T.max(gate_transform(raw_g, T.cast(a_log[hv], "float32"), T.cast(dt_bias[hv], "float32")),
                             LOG_DECAY_FLOOR)
        else:
            g_s[row] = T.max(raw_g, LOG_DECAY_FLOOR)
        if beta_sigmoid:
            b_s[row] = T.sigmoid(raw_b) * (2.0 if neg_eigval else 1.0)
        else:
            b_s[row] = raw_b

    return transform


def row_rnorm(rows: int, width: int):
    """A macro that writes 1 / ‖row‖ of ``rows`` rows of a ``width``-wide tile (the L2 norm's factors)."""

    @T.macro
    def rnorm(src_s, dst_s):
        sq_f = T.alloc_fragment([rows, width], "float32")
        ss_f = T.alloc_fragment([rows], "float32")
        T.copy(src_s, sq_f)
        for i, j in T.Parallel(rows, width):
            sq_f[i, j] = sq_f[i, j] * sq_f[i, j]
        T.reduce_sum(sq_f, ss_f, dim=1)
        for i in T.Parallel(rows):
            dst_s[i] = T.rsqrt(ss_f[i] + 1e-6)

    return rnorm

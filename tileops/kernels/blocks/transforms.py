"""Input transforms of a chunk's tokens, applied in the kernel: GDN's gate from A_log and dt_bias,
β through a sigmoid (doubled for negative eigenvalues), and the L2 norms' row factors of q and k."""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures


def gate_transform(raw, a_log, dt_bias):
    """GDN's gate in kernel: -exp(A_log) * softplus(raw + dt_bias), softplus linear above 20."""
    x = raw + dt_bias
    return -T.exp(a_log) * T.if_then_else(x > 20.0, x, T.log1p(T.exp(x)))


def input_transforms(*, gate_in_kernel: bool, beta_sigmoid: bool, neg_eigval: bool):
    """A macro that writes one token's gate and step size, transformed as the flags say, into
    row ``row`` of ``g_s`` and ``b_s``."""

    @T.macro
    def transform(raw_g, raw_b, a_log, dt_bias, hv, g_s, b_s, row):
        if gate_in_kernel:
            g_s[row] = gate_transform(raw_g, T.cast(a_log[hv], "float32"), T.cast(dt_bias[hv], "float32"))
        else:
            g_s[row] = raw_g
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

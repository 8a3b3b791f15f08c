"""The entry both chain layouts share: their arguments and grid, and each CTA's sequence bounds."""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.blocks.entry import Sequences, kernel_entry


def chain_kernel(run_chain, *, heads: int, value_heads: int, dim_k: int, dim_v: int, chunk: int,
                 block_v: int, dtype: str, sequences: str, state_v_first: bool, threads: int,
                 boundaries: bool = False, chunk_major: bool = False, channel: bool = False, delta: bool = True):
    """The prim_func that runs ``run_chain`` (a ``T.macro`` taking q, k, ku, v, tp, m, f, h0, o, ht, hs
    and the CTA's sequence n, value head hv, V tile bv, token bounds bos..eos and has_init), for
    ``equal`` or ``packed`` sequences (``blocks.entry``). Without an initial state, pass any tensor
    of the state's shape as ``h0`` (it is not read). ``boundaries``: one more output, ``hs``
    [N, HV, chunks + 1, K, V] in fp32, the state at every chunk boundary of each sequence (its
    windows' starts, then its end), or [N, chunks + 1, HV, K, V] with ``chunk_major`` (BTHD's
    order); else ``hs`` is None. Grid: (V / block_v, HV, N).

    ``channel`` (one decay per key channel, ``chunk_prep_channel``'s outputs): q, k and ku are Q_o,
    K_x and K_s [HV, tokens, K] and f the segments' decays [HV, W + N, K]; else ku is None.
    Without ``delta`` (channel only: GLA's plain gated sum) there is neither k (K_x) nor tp; both
    reach ``run_chain`` as None.
    """
    H, HV, K, V, C, BV = heads, value_heads, dim_k, dim_v, chunk, block_v
    accum = "float32"
    tokens = T.dynamic("tokens")
    seqs = Sequences(sequences, HV, with_state=True, tokens=tokens)
    state_shape = seqs.state_shape(HV, K, V, state_v_first)
    if channel:
        keys = [(name, T.Tensor([HV, tokens, K], dtype)) for name in ("q", "k", "ku")]
        factors = T.Tensor([HV, T.dynamic("decay_rows"), K], accum)
    else:
        keys = [("q", T.Tensor([tokens, H, K], dtype)), ("k", T.Tensor([tokens, H, K], dtype))]
        factors = T.Tensor([4, HV, tokens], accum)
    inputs = keys + [("v", T.Tensor([tokens, HV, V], dtype)), ("tp", T.Tensor([HV, tokens, C], dtype)),
                     ("m", T.Tensor([HV, tokens, C], dtype)), ("f", factors), ("h0", T.Tensor(state_shape, accum))]
    assert delta or channel, "only the per-channel walk goes without the delta rule"
    if not delta:
        inputs = [arg for arg in inputs if arg[0] not in ("k", "tp")]
    outputs = [("o", T.Tensor([tokens, HV, V], dtype)), ("ht", T.Tensor(state_shape, accum))]
    if boundaries:
        bounds = T.dynamic("bounds")
        outputs.append(("hs", T.Tensor([seqs.nseq, bounds, HV, K, V] if chunk_major else [seqs.nseq, HV, bounds, K, V],
                                       accum)))

    @T.macro
    def grid(q, k, ku, v, tp, m, f, h0, o, ht, hs, seqs):
        with T.Kernel(V // BV, HV, seqs.walks, threads=threads) as (bv, hv, n):
            run_chain(q, k, ku, v, tp, m, f, h0, o, ht, hs, n, hv, bv, seqs.begin(n), seqs.end(n),
                      seqs.has_init(n, hv))

    def launch(*args):
        """The entry's arguments, with None for the update keys without ``channel``, for K_x and T'
        without ``delta`` and for the boundary states' output without ``boundaries``."""
        if not channel:
            args = [*args[:2], None, *args[2:]]
        elif not delta:
            args = [args[0], None, args[1], args[2], None, *args[3:]]
        return grid(*args) if boundaries else grid(*args[:-1], None, args[-1])

    return kernel_entry("chain", seqs, inputs, outputs, launch)

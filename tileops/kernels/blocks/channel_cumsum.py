"""γ of a window under one decay per key channel (KDA, GLA): each channel's cumulative log decay
down the window's rows in base 2 (every factor of the first pass is then one exp2), restarting at
each sequence's first row.

A channel's PARTS lanes of one warp (two at K = 128, four at K = 64) each sum R = C / PARTS rows in
registers from zero, straight from the gate's loads; shuffles then carry what enters each part's
rows before its first restart and give the channel's range. The rows' sequences come from the
lanes as ballots, so no barrier stands before the sums and shared memory sees only γ's stores
(docs/kda-gated-products.md, "γ's scan in registers").
"""

import math
from typing import Callable, NamedTuple

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures

from tileops.kernels.blocks.transforms import LOG_DECAY_FLOOR, channel_gate_transform
from tileops.kernels.blocks.window_fold import FOLD_REACH
from tileops.kernels.hardware import WARP

LOG2_E = math.log2(math.e)  # γ is kept in base 2: each gate factor is one exp2
FAR = 3.0e38  # above any γ: the empty range's ends
SPAN_BITS = 8  # a row's first row of its sequence in the window below, its last above
MASK_WORDS = 4  # the rows that begin their sequence (rows 0-31, 32-63), then those that end it


def span_first(span):
    """From a row's ``rows`` span entry: its sequence's first row in the window."""
    return span & ((1 << SPAN_BITS) - 1)


def span_last(span, chunk: int):
    """From a row's ``rows`` span entry: its sequence's last row in the window (the window's last
    where the sequence goes on past it)."""
    return T.min(span >> SPAN_BITS, chunk - 1)


class ChannelCumsum(NamedTuple):
    """The macros of γ's scan, in the order a window calls them, and the rows each thread holds."""
    rows_held: int  # R: the length of ``gate_loads``' and ``scan``'s register array
    gate_loads: Callable
    rows: Callable
    scan: Callable
    segment_decays: Callable


def channel_cumsum(*, chunk: int, dim_k: int, threads: int, tokens, varlen: bool, nseq, delta: bool,
                   gate_in_kernel: bool, beta_sigmoid: bool, neg_eigval: bool, lower_bound=None) -> ChannelCumsum:
    """γ's macros for ``threads`` threads on C = ``chunk`` rows and K = ``dim_k`` channels: the
    program's ``tokens`` and (packed sequences, ``varlen``) ``nseq``; ``delta``: the rows' β too;
    the gate's flags as the first pass takes them."""
    C, K, THREADS = chunk, dim_k, threads
    accum = "float32"
    PARTS = THREADS // K  # the threads of one key channel in γ's scan, all in one warp
    R = C // PARTS  # the rows each sums
    LANES = WARP // PARTS  # a warp's channels
    assert C == 2 * WARP and PARTS in (2, 4), "a lane per row and half; a channel's parts in one warp"

    def part(tx):
        """The thread's part of its channel's rows in γ's scan."""
        return tx % WARP // LANES

    def channel(tx):
        """The thread's key channel in γ's scan."""
        return tx // WARP * LANES + tx % LANES

    def has(mask, u):
        """Whether bit u of a uint32 mask is set (shifts in uint32: TVM's simplifier folds a test
        against bit 31 into an int32 literal it cannot hold)."""
        return T.shift_right(mask, T.uint32(u)) & T.uint32(1) != T.uint32(0)

    def none_to(mask, u):
        """Whether bits 0 .. u of a uint32 mask are all clear."""
        return T.shift_left(mask, T.uint32(WARP - 1 - u)) == T.uint32(0)

    @T.macro
    def gate_loads(g, g_in, hv, t0, tx):
        """The raw gates of the thread's R rows of its channel (zero past the tokens) into ``g_in``,
        in g's dtype: they issue before the tiles' loads, and a 16-bit gate is widened in ``scan``, so
        that no load waits for the one before it to land."""
        p, c = part(tx), channel(tx)
        for u in T.unroll(R, explicit=True):
            t = t0 + p * R + u
            g_in[u] = T.if_then_else(t < tokens, g[t, hv, c], T.cast(0.0, g.dtype))

    @T.macro
    def rows(beta, bounds, b_s, seg_s, span_s, masks, hv, t0, tx):
        """Per row: its sequence (``seg_s``, negative outside), and in ``span_s`` the sequence's
        first row in the window and, on bits SPAN_BITS and up, its last row there or C where it goes
        on past the window; and β: a lane takes rows lane and lane + 32, and the first warp writes
        the tables. Every warp keeps, as ballots of its lanes, the rows that begin their sequence
        (``masks[0]``, rows 0-31, and ``masks[1]``, rows 32-63) and those that end it (2, 3)."""
        seg = T.alloc_var("int32")
        s_beg = T.alloc_var("int32")
        s_end = T.alloc_var("int32")
        lo = T.alloc_var("int32")
        hi = T.alloc_var("int32")
        for half in T.unroll(2, explicit=True):
            i = half * WARP + tx % WARP
            t = t0 + i
            if varlen:  # the sequence holding token t: a binary search of cu_seqlens
                lo = 0
                hi = nseq
                while hi - lo > 1:
                    mid = (lo + hi) >> 1
                    if bounds[mid] <= t:
                        lo = mid
                    else:
                        hi = mid
                seg = lo
                s_beg = bounds[lo]
                s_end = bounds[lo + 1]
            else:
                seg = t // bounds
                s_beg = seg * bounds
                s_end = s_beg + bounds
            inside = t < s_end and t < tokens and s_beg <= t
            masks[half] = T.cast(T.ballot(inside and t == s_beg), "uint32")
            masks[2 + half] = T.cast(T.ballot(inside and t == s_end - 1), "uint32")
            if tx < WARP:
                seg_s[i] = T.if_then_else(inside, seg, -1 - i)  # rows outside meet no other row
                span_s[i] = T.max(s_beg - t0, 0) + (T.max(T.min(s_end - t0 - 1, C), 0) << SPAN_BITS)
                if delta:
                    raw_b = T.if_then_else(inside, beta[T.min(t, tokens - 1), hv], 0.0)
                    if beta_sigmoid:
                        b_s[i] = T.if_then_else(inside, T.sigmoid(raw_b) * (2.0 if neg_eigval else 1.0), 0.0)
                    else:
                        b_s[i] = raw_b

    def part_bits(masks, kind, p):
        """Part p's R bits of a window mask (``kind``: 0 starts, 2 ends), from bit 0."""
        bits = T.if_then_else(p * R < WARP, masks[kind], masks[kind + 1])
        if R == WARP:
            return bits
        return T.shift_right(T.shift_left(bits, T.uint32(WARP - R) - T.cast(p * R % WARP, "uint32")), T.uint32(WARP - R))

    @T.macro
    def scan(g_in, g_l, a_log, dt_bias, masks, gam_s, rho_s, fit_s, decay, hv, w, t0, tx):
        """γ from ``gate_loads``' raw gates ``g_in`` into ``g_l`` (fp32; the same registers where g
        is fp32): each channel's running sum down the window in base 2, restarting at each sequence's
        first row and adding nothing on rows outside the sequences, into ``gam_s`` [K, C]; the
        state's decay over the window into row w of ``decay``; each channel's midpoint ρ of γ over
        the rows inside into ``rho_s``; each warp's ``fit_s`` entry 1 where no channel of it spans
        more than 2^{±FOLD_REACH}. The PARTS lanes of a channel each sum R rows in registers from
        zero, then add, from the lanes before them, what enters their rows before their first
        restart. The sequences' ends are ``segment_decays``'s, past the barrier."""
        p, c = part(tx), channel(tx)
        starts = T.alloc_var("uint32")
        starts = part_bits(masks, 0, p)
        last = T.min(tokens - t0, C) - 1  # the window's last row inside the sequences, which end at the tokens' end
        run = T.alloc_var(accum)
        run = 0.0
        for u in T.unroll(R, explicit=True):
            if gate_in_kernel:  # a raw zero past the tokens is no zero after the transform
                step = T.if_then_else(p * R + u <= last, T.max(channel_gate_transform(
                    T.cast(g_in[u], accum) + dt_bias[hv * K + c], a_log[hv], lower_bound), LOG_DECAY_FLOOR) * LOG2_E,
                    0.0)
            else:
                step = T.max(T.cast(g_in[u], accum), LOG_DECAY_FLOOR) * LOG2_E
            run = T.if_then_else(has(starts, u), 0.0, run) + step
            g_l[u] = run
        carry = T.alloc_var(accum)
        into = T.alloc_var(accum)  # γ entering part q
        carry = 0.0
        into = 0.0
        for q in T.unroll(PARTS, explicit=True):
            carry = T.if_then_else(p == q, into, carry)
            into = T.if_then_else(part_bits(masks, 0, q) != T.uint32(0), 0.0, into) + T.shfl_sync(run, tx % LANES + q * LANES)
        low = T.alloc_var(accum)
        high = T.alloc_var(accum)
        at_last = T.alloc_var(accum)
        low = FAR
        high = -FAR
        at_last = 0.0
        for u in T.unroll(R, explicit=True):  # the rows past the last repeat its γ: no test for them
            g_l[u] = g_l[u] + T.if_then_else(none_to(starts, u), carry, 0.0)
            low = T.min(low, g_l[u])
            high = T.max(high, g_l[u])
            at_last = T.if_then_else(p * R + u == last, g_l[u], at_last)
        if last // R == p:
            decay[hv, w, c] = T.exp2(at_last)
        for u in T.unroll(R, explicit=True):  # parts 32 rows apart meet in one bank: two ways
            gam_s[c, p * R + u] = g_l[u]
        for level in T.unroll(PARTS.bit_length() - 1, explicit=True):  # the channel's PARTS lanes
            low = T.min(low, T.shfl_xor(low, LANES << level))
            high = T.max(high, T.shfl_xor(high, LANES << level))
        if p == 0:
            rho_s[c] = (low + high) * 0.5
        wide = T.cast(T.ballot(high - low > 2 * FOLD_REACH), "uint32")
        if tx % WARP == 0:
            fit_s[tx // WARP] = T.if_then_else(wide == T.uint32(0), 1, 0)

    @T.macro
    def segment_decays(g_l, masks, seg_s, decay, hv, tx):
        """The state's decay over each sequence that ends in the window, from its last row's γ (the
        thread's registers) into row W + n of ``decay``; after the barrier that publishes ``seg_s``."""
        p, c = part(tx), channel(tx)
        ends = T.alloc_var("uint32")
        ends = part_bits(masks, 2, p)
        if ends != T.uint32(0):
            for u in T.unroll(R, explicit=True):
                if has(ends, u):
                    decay[hv, T.ceildiv(tokens, C) + seg_s[p * R + u], c] = T.exp2(g_l[u])

    return ChannelCumsum(R, gate_loads, rows, scan, segment_decays)

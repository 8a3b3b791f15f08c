"""The per-channel two-pass prefill (``chunk_prep_channel`` then the per-channel value-major chain:
KDA's with the delta rule, GLA's without: ``beta`` None) in PyTorch,
step for step: the packed token axis cut into 64-token windows, each window's segments (one per
sequence it touches, γ restarting at each), the gated products as one fold about each channel's
midpoint where every channel's span allows it, else the 16-row blocks met about their first rows
and the pairs inside a block about its middle row (one by one where the decays leave that form's
range), the WY solve, the decayed keys and queries and the segments'
decay rows; then each sequence's walk over its windows with the columns outside it masked and
the decay row its segment reads.

``rounding`` (a 16-bit dtype, or None for exact float64) rounds what the GPU rounds: the fold's
operands to two bf16 parts each, the blocks' off-diagonal operands to fp16, their in-block
operands to two bf16 parts each, the first pass's outputs to the token dtype, and the walk's 16-bit
operands (its copy of Sᵀ, Xᵀ and Δᵀ). Products accumulate in float64 either way. Without the delta
rule, a window that takes the fold forms Q_o and K_s out of the fold's operands, as the kernel does.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from tileops.kernels.blocks.channel_pairs import LIMIT as PAIRS_LIMIT
from tileops.kernels.blocks.transforms import LOG_DECAY_FLOOR
from tileops.kernels.blocks.window_fold import FOLD_REACH

F64 = torch.float64
C = 64
BLOCK = 16


def rounded(x: torch.Tensor, dtype: Optional[torch.dtype]) -> torch.Tensor:
    return x if dtype is None else x.to(dtype).to(F64)


def split_bf16(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x in fp32 as two bf16 parts: its rounding and the rest, rounded."""
    x = x.to(torch.float32)
    hi = x.to(torch.bfloat16)
    return hi.to(F64), (x - hi.to(torch.float32)).to(torch.bfloat16).to(F64)


def block_pairs(x: torch.Tensor, k: torch.Tensor, gamma: torch.Tensor, rounding) -> torch.Tensor:
    """Σ_c x_ic k_jc e^{γ_ic − γ_jc} over one 16-row block [heads, 16, K] (the caller keeps j ≤ i of
    one sequence), as ``blocks.channel_pairs`` forms it: for each half of the channels, folded
    about the block's middle row, with ``rounding`` each operand in two bf16 parts and three
    products, while every |γ_i − γ_m| of that half stays within LIMIT (base 2); one by one (exact)
    otherwise."""
    heads, rows, dim = x.shape
    pair_decay = (gamma[:, :, None, :] - gamma[:, None, :, :]).exp()
    pairs = torch.einsum("hic,hjc,hijc->hijc", x, k, pair_decay)
    out = torch.zeros(heads, rows, rows, dtype=F64)
    offset = gamma - gamma[:, rows // 2:rows // 2 + 1]
    for half in (slice(0, dim // 2), slice(dim // 2, dim)):
        exact = pairs[..., half].sum(-1)
        up, down = offset[..., half].exp(), (-offset[..., half]).exp()
        left, right = x[..., half] * up, k[..., half] * down
        if rounding is None:
            folded = left @ right.mT
        else:
            (l_hi, l_lo), (r_hi, r_lo) = split_bf16(left), split_bf16(right)
            folded = l_hi @ r_hi.mT + l_hi @ r_lo.mT + l_lo @ r_hi.mT
        inside = offset[..., half].abs().amax(dim=(1, 2)) <= PAIRS_LIMIT * math.log(2)
        out += torch.where(inside[:, None, None], folded, exact)
    return torch.where(torch.ones(rows, rows, dtype=torch.bool).tril(), out, 0.0)


def blocks_form(qw, kw, gamma, seg, rounding):
    """K Kᵀ and Q Kᵀ of one window [heads, C, C] as the kernel forms them where a channel's span is
    past the fold's reach: each 16-row block against the rows before it about its first row
    (fp16 operands), the pairs inside a block about its middle row."""
    heads = qw.shape[0]
    rows = torch.arange(C)
    same = seg[:, None] == seg[None, :]
    a_sum = torch.zeros(heads, C, C, dtype=F64)
    m_sum = torch.zeros_like(a_sum)
    for blk in range(1, C // BLOCK):
        r = blk * BLOCK
        own = ((rows // BLOCK == blk) & same[:, r])[None, :, None]
        before = ((rows < r) & same[:, r])[None, :, None]
        down = (gamma - gamma[:, r:r + 1]).exp()
        up = (gamma[:, r:r + 1] - gamma).exp()
        lk = rounded(torch.where(own, kw * down, 0.0), rounding and torch.float16)
        lq = rounded(torch.where(own, qw * down, 0.0), rounding and torch.float16)
        rk = rounded(torch.where(before, kw * up, 0.0), rounding and torch.float16)
        a_sum += lk @ rk.mT
        m_sum += lq @ rk.mT
    for blk in range(C // BLOCK):
        inside = slice(blk * BLOCK, blk * BLOCK + BLOCK)
        a_sum[:, inside, inside] += block_pairs(kw[:, inside], kw[:, inside], gamma[:, inside], rounding)
        m_sum[:, inside, inside] += block_pairs(qw[:, inside], kw[:, inside], gamma[:, inside], rounding)
    return a_sum, m_sum


def fold_midpoints(gamma, seg):
    """Whether each head's window takes the whole-window fold (every channel's half-span of γ over
    the rows inside within FOLD_REACH, base 2), and each channel's midpoint ρ [heads, 1, K] (zero
    where the window does not fit)."""
    inside = (seg >= 0)[None, :, None]
    low = torch.where(inside, gamma, math.inf).amin(1, keepdim=True)
    high = torch.where(inside, gamma, -math.inf).amax(1, keepdim=True)
    fits = ((high - low) * math.log2(math.e) <= 2 * FOLD_REACH).squeeze(1).all(-1)
    return fits, torch.where(fits[:, None, None], (low + high) / 2, 0.0)


def fold_decayed(qw, kw, gamma, rho, end_row, scale):
    """Without the delta rule, in a window that fits: Q_o and K_s as the fold's fill forms them, out
    of its operands, scale q̃ ⊙ e^ρ and k̃ ⊙ e^{γ_end − ρ} (q̃ = q ⊙ e^{γ − ρ}, k̃ = k ⊙ e^{ρ − γ}),
    in the dtype of the inputs."""
    offset = gamma - rho
    return scale * (qw * offset.exp()) * rho.exp(), (kw * (-offset).exp()) * (gamma[:, end_row] - rho).exp()


def window_fold(qw, kw, gamma, seg, rounding):
    """Whether each head's window takes the whole-window fold (``fold_midpoints``), and its K Kᵀ
    and Q Kᵀ [heads, C, C]: x_i ⊙ e^{γ_i − ρ} against k_j ⊙ e^{ρ − γ_j}, ρ each channel's midpoint,
    rows outside zero, with ``rounding`` each operand in two bf16 parts and three products.
    Entries the caller masks may overflow."""
    inside = (seg >= 0)[None, :, None]
    fits, rho = fold_midpoints(gamma, seg)
    offset = torch.where(fits[:, None, None], gamma - rho, 0.0)  # windows that do not fit: unused
    up, down = offset.exp(), (-offset).exp()
    right = torch.where(inside, kw * down, 0.0)

    def product(x):
        left = torch.where(inside, x * up, 0.0)
        if rounding is None:
            return left @ right.mT
        (l_hi, l_lo), (r_hi, r_lo) = split_bf16(left), split_bf16(right)
        return l_hi @ r_hi.mT + l_hi @ r_lo.mT + l_lo @ r_hi.mT
    return fits, product(kw), product(qw)


def sequence_of(bounds: list[int], tokens: int) -> torch.Tensor:
    """The sequence of every token of the packed axis."""
    seq = torch.empty(tokens, dtype=torch.long)
    for n, (a, b) in enumerate(zip(bounds, bounds[1:])):
        seq[a:b] = n
    return seq


def first_pass(q, k, g, beta, bounds, *, scale, rounding=None):
    """The first pass's outputs: tp, m [HV, tokens, C], qo, kx, ks [HV, tokens, K], decay
    [HV, W + N, K]. q, k, g [tokens, HV, K] (q and k already per value head, normalised as the
    kernel's row factors would), beta [tokens, HV], or None without the delta rule (then tp and
    kx are None); ``bounds`` the sequences' offsets."""
    delta = beta is not None
    if not delta:
        beta = torch.zeros(q.shape[:2], dtype=F64)
    tokens, heads, dim = q.shape
    windows = -(-tokens // C)
    seq = sequence_of(bounds, tokens)
    tp = torch.zeros(heads, tokens, C, dtype=F64)
    m = torch.zeros_like(tp)
    qo, kx, ks = (torch.zeros(heads, tokens, dim, dtype=F64) for _ in range(3))
    decay = torch.zeros(heads, windows + len(bounds) - 1, dim, dtype=F64)
    rows = torch.arange(C)
    for w in range(windows):
        t0 = w * C
        n = min(C, tokens - t0)

        def window(x):
            out = torch.zeros((C, *x.shape[1:]), dtype=F64)
            out[:n] = x[t0:t0 + n]
            return out.transpose(0, 1)  # heads first
        qw, kw, gw, bw = window(q), window(k), window(g), window(beta)
        seg = torch.full((C,), -1, dtype=torch.long) - rows  # rows past the tokens meet no other row
        seg[:n] = seq[t0:t0 + n]
        starts = torch.tensor([bounds[s] for s in seg[:n]] + [t0 + i for i in range(n, C)])
        ends = torch.tensor([bounds[s + 1] for s in seg[:n]] + [t0 + C] * (C - n))
        restart = (starts - t0).clamp_min(0) == rows
        gamma = torch.zeros_like(gw)
        run = torch.zeros(heads, dim, dtype=F64)
        for i in range(C):
            run = torch.where(restart[i], 0.0, run) + gw[:, i].clamp_min(LOG_DECAY_FLOOR)
            gamma[:, i] = run
        same = seg[:, None] == seg[None, :]
        a_sum, m_sum = blocks_form(qw, kw, gamma, seg, rounding)
        fits, a_fold, m_fold = window_fold(qw, kw, gamma, seg, rounding)
        a_sum = torch.where(fits[:, None, None], a_fold, a_sum)
        m_sum = torch.where(fits[:, None, None], m_fold, m_sum)
        a = torch.where(same & (rows[None, :] < rows[:, None]), bw[:, :, None] * a_sum, 0.0)
        mm = torch.where(same & (rows[None, :] <= rows[:, None]), scale * m_sum, 0.0)
        eye = torch.eye(C, dtype=F64)
        inverse = torch.linalg.solve_triangular(eye + a, eye.expand_as(a), upper=False, unitriangular=True)
        if not delta:
            inverse = None
        end_row = (ends - t0).clamp(max=C) - 1
        if delta:
            tp[:, t0:t0 + n] = rounded(inverse * bw[:, None, :], rounding)[:, :n]
        m[:, t0:t0 + n] = rounded(mm, rounding)[:, :n]
        qo_w, ks_w = scale * qw * gamma.exp(), kw * (gamma[:, end_row] - gamma).exp()
        if not delta:  # where the window fits, the fold's fill forms them
            fold_qo, fold_ks = fold_decayed(qw, kw, gamma, fold_midpoints(gamma, seg)[1], end_row, scale)
            qo_w = torch.where(fits[:, None, None], fold_qo, qo_w)
            ks_w = torch.where(fits[:, None, None], fold_ks, ks_w)
        qo[:, t0:t0 + n] = rounded(qo_w, rounding)[:, :n]
        kx[:, t0:t0 + n] = rounded(kw * gamma.exp(), rounding)[:, :n]
        ks[:, t0:t0 + n] = rounded(ks_w, rounding)[:, :n]
        decay[:, w] = gamma[:, n - 1].exp()
        for i in range(n):
            if t0 + i == ends[i] - 1:
                decay[:, windows + seg[i]] = gamma[:, i].exp()
    return (tp, m, qo, kx, ks, decay) if delta else (None, m, qo, None, ks, decay)


def walk(first, v, bos, eos, state, o=None, *, sequence_end=None, rounding=None):
    """The chain's walk over tokens bos..eos from ``state`` [HV, K, V]: the state at eos, and the
    outputs into ``o`` [tokens, HV, V] where given. ``sequence_end``: the sequence's index when eos
    ends it (its last window then decays by the sequence's row; a walk that stops inside its
    sequence stops at a window's end, whose own row is the decay)."""
    tp, m, qo, kx, ks, decay = first
    windows = -(-qo.shape[1] // C)
    for w in range(bos // C, -(-eos // C)):
        t0 = w * C
        lo, hi = max(bos - t0, 0), min(eos - t0, C)
        span = slice(t0 + lo, t0 + hi)
        s16 = rounded(state, rounding)
        if tp is None:  # no delta rule: Δ is V
            delta = v[span].transpose(0, 1).to(F64)
        else:
            x = rounded(v[span].transpose(0, 1).to(F64) - kx[:, span] @ s16, rounding)
            delta = rounded(tp[:, span, lo:hi] @ x, rounding)
        if o is not None:
            o[span] = (qo[:, span] @ s16 + m[:, span, lo:hi] @ delta).transpose(0, 1)
        row = windows + sequence_end if sequence_end is not None and eos <= t0 + C else w
        state = decay[:, row, :, None] * state + ks[:, span].mT @ delta
    return state


def chain(first, v, bounds, initial_state=None, *, rounding=None):
    """Each sequence's walk: (o [tokens, HV, V], final state [N, HV, K, V])."""
    heads, tokens, dim = first[2].shape
    count = len(bounds) - 1
    o = torch.zeros(tokens, heads, v.shape[-1], dtype=F64)
    final = torch.zeros(count, heads, dim, v.shape[-1], dtype=F64)
    for n in range(count):
        state = torch.zeros(heads, dim, v.shape[-1], dtype=F64) if initial_state is None else initial_state[n].to(F64)
        final[n] = walk(first, v, bounds[n], bounds[n + 1], state, o, sequence_end=n, rounding=rounding)
    return o, final


def chained_entries(plan, finals, initial, step):
    """The entries ``programs.channel_entries`` forms, step for step: per sequence its first
    piece's entry is the initial state (zeros without one), then S_{p+1} = step(p, S_p) + F_p."""
    first, last = plan.first.tolist(), plan.last.tolist()
    entries = torch.empty_like(finals)
    for n, (a, b) in enumerate(zip(first, last)):
        state = torch.zeros_like(finals[0]) if initial is None else initial[n].clone()
        entries[a] = state
        for p in range(a, b):
            state = step(p, state) + finals[p]
            entries[p + 1] = state
    return entries

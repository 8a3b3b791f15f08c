"""Splitting sequences into pieces that CTAs walk side by side, and the device tables that say so.

One CTA walks one (piece, value head). A sequence of more than ``piece_chunks`` chunks is cut
every ``piece_chunks`` chunks from its start, so that few long sequences still fill the SMs; the
CTA of a piece after the first walks a few chunks before it first, outputs off (its warm-up, as
far back as ``warm_start`` says), to reach the state at its first token. The
tables depend only on the lengths, so they are built once per lengths and copied to the device
from pinned memory without a host sync. Known lengths also order the pieces longest first: the
GPU starts CTAs in grid order as SMs free up, so a long walk started last would set the call's
time (16 mixed sequences: 128 chunk steps an SM instead of 144).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

import torch

from tileops.callspec import CallSpec
from tileops.kernels.hardware import sm_count

PIECE_WIDTHS = (16, 32, 64, 128)  # the chunks a piece of a cut sequence may span
WARM_CHUNKS = 4  # chunks a piece's warm-up walks under the benchmarks' decays, about e^-0.1 a token
SUMMARY_COST = 0.8  # a summary job's chunk against a walk's (docs/exact-pieces.md)
# One step Φ S of an entry chain in walk chunks: 128³ fp32 FMAs on one SM's 128 lanes, about 9 µs.
CHAIN_STEP = 3
MIN_SPAN = 16  # the fewest chunks a summary job walks


@dataclass(frozen=True)
class PiecePlan:
    """Per piece: ``start`` (first token), ``end`` (one past its last), ``first`` (its sequence's
    first token), ``seq`` (its sequence) and ``out_row`` (the sequence for its last piece, whose
    state is the sequence's final state, else −1). ``starts``: ``start`` repeated for every value
    head ([P, HV]), where the walk of uncut pieces begins per CTA, and ``entry_rows`` [2, P, HV]
    where it takes each piece's initial state: −1 (zeros) in ``[0]``, its sequence's row of the
    initial state in ``[1]``; ``exact_rows`` [2, P, HV] the same where every piece after its
    sequence's first takes its exact entry, row N + p (``plans.entries``; a host plan's only).
    On the device, int32. ``cut``: some piece starts after its
    sequence's first token (it needs a warm-up or an exact entry). ``pinned``: the host tables
    they were copied from, kept so that a CUDA graph that captured the copies replays them from
    live memory. ``lengths``: the sequence lengths a host plan was built from (none for offsets
    known only on the device)."""

    start: torch.Tensor
    end: torch.Tensor
    first: torch.Tensor
    seq: torch.Tensor
    out_row: torch.Tensor
    starts: torch.Tensor
    entry_rows: torch.Tensor
    cut: bool
    pinned: tuple = ()
    lengths: tuple = ()
    exact_rows: Optional[torch.Tensor] = None

    @property
    def count(self) -> int:
        return self.start.shape[0]


def piece_bounds(lengths: tuple[int, ...], piece_chunks: int, chunk: int) -> list[tuple[int, int, int, int]]:
    """(start, end, first, seq) of every piece, in order: each sequence cut every ``piece_chunks``
    chunks from its start (whole when ``piece_chunks`` is 0)."""
    width = piece_chunks * chunk
    out = []
    first = 0
    for seq, length in enumerate(lengths):
        start = first
        while True:
            end = first + length if not width else min(first + length, start + width)
            out.append((start, end, first, seq))
            if end >= first + length:
                break
            start = end
        first += length
    return out


def to_device(table: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``table`` on ``device``, and the host copy it came from: pinned memory on CUDA, so that the
    copy does not wait for the device."""
    host = table.pin_memory() if device.type == "cuda" else table
    return host.to(device, non_blocking=True), host


@functools.lru_cache(maxsize=64)
def host_plan(lengths: tuple[int, ...], piece_chunks: int, chunk: int, value_heads: int,
              device: torch.device) -> PiecePlan:
    """The plan of sequences with known ``lengths``, on ``device``: the pieces longest first (a
    stable order, so equal pieces keep the order of their sequences)."""
    bounds = piece_bounds(lengths, piece_chunks, chunk)
    last = [i + 1 == len(bounds) or bounds[i + 1][3] != b[3] for i, b in enumerate(bounds)]
    order = sorted(range(len(bounds)), key=lambda i: bounds[i][0] - bounds[i][1])
    pieces = [(*bounds[i], bounds[i][3] if last[i] else -1) for i in order]
    table = torch.tensor([[p[i] for p in pieces] for i in range(5)], dtype=torch.int32)
    later = table[0] != table[2]  # pieces after their sequence's first
    entry = torch.arange(len(pieces), dtype=torch.int32) + len(lengths)
    wide = torch.stack([table[0], torch.full_like(table[3], -1), table[3],
                        torch.where(later, entry, -1), torch.where(later, entry, table[3])])
    wide = wide.unsqueeze(2).expand(5, len(pieces), value_heads).contiguous()
    (narrow, narrow_host), (broad, broad_host) = to_device(table, device), to_device(wide, device)
    return PiecePlan(*narrow.unbind(0), broad[0], broad[1:3], bool(later.any()), pinned=(narrow_host, broad_host),
                     lengths=lengths, exact_rows=broad[3:])


@functools.lru_cache(maxsize=64)
def sequence_rows(count: int, value_heads: int, device: torch.device) -> tuple:
    """``arange(count)`` and the ``entry_rows`` of ``count`` whole sequences, on ``device``, with
    the host tables they came from: they depend on the count alone."""
    row = torch.arange(count, dtype=torch.int32)
    wide = torch.stack([torch.full_like(row, -1), row]).unsqueeze(2).expand(2, count, value_heads).contiguous()
    (narrow, narrow_host), (broad, broad_host) = to_device(row, device), to_device(wide, device)
    return narrow, broad, (narrow_host, broad_host)


def whole_plan(bounds: torch.Tensor, value_heads: int) -> PiecePlan:
    """The plan of packed sequences whose int32 offsets ``bounds`` stay on the device: one piece
    each, in their order. One copy a call (the starts per value head); the rest is cached."""
    row, entry_rows, pinned = sequence_rows(bounds.shape[0] - 1, value_heads, bounds.device)
    starts = bounds[:-1].unsqueeze(1).expand(row.shape[0], value_heads).contiguous()
    return PiecePlan(bounds[:-1], bounds[1:], bounds[:-1], row, row, starts, entry_rows, False, pinned)


def piece_width(walks: int, chunks: int, sms: int, exact: bool = False) -> int:
    """The piece width (in chunks; 0 for whole sequences) that a model of the fused kernel's time
    likes best: the waves of CTAs over ``sms`` SMs times the chunks each walks, a piece's warm-up
    of WARM_CHUNKS chunks included once sequences are cut, or with ``exact`` (no gate: every later
    piece takes its exact entry) the summaries of whole pieces before the walk (``summary_time``;
    the widths this model picks were timed so, and the plan's shorter spans only speed up the
    summaries of the width picked). Ties go to the wider pieces (fewer warm-ups or summaries)."""
    best, best_cost = 0, -(-walks // sms) * chunks
    for width in sorted(PIECE_WIDTHS, reverse=True):
        if width >= chunks:
            continue
        pieces = -(-chunks // width)
        cost = -(-walks * pieces // sms) * (width + (0 if exact else WARM_CHUNKS))
        if exact:
            cost += summary_time((chunks,), width, walks, sms, width)
        if cost < best_cost:
            best, best_cost = width, cost
    return best


def summary_jobs(chunks: int, piece_chunks: int, span: int = 0) -> int:
    """The exact schedule's summary jobs for one sequence of ``chunks`` chunks cut every
    ``piece_chunks``, each job walking ``span`` chunks (0: a piece): R of every span of the pieces
    but the last, Φ of each of those spans but the first."""
    pieces = -(-chunks // piece_chunks) if piece_chunks else 1
    spans = (pieces - 1) * (piece_chunks // (span or piece_chunks)) if pieces > 1 else 0
    return 2 * spans - 1 if spans else 0


def summary_time(chunks: tuple[int, ...], piece_chunks: int, value_heads: int, sms: int, span: int) -> float:
    """The summaries' and entry chains' time in walk chunks for sequences of ``chunks`` chunks
    (``value_heads`` each) cut every ``piece_chunks``, each summary job walking ``span`` chunks:
    the waves of jobs over ``sms`` SMs, SUMMARY_COST of a walk chunk each, then the longest
    chain's steps Φ S at CHAIN_STEP each."""
    per_sequence = [summary_jobs(c, piece_chunks, span) for c in chunks]
    jobs = value_heads * sum(per_sequence)
    steps = max((j + 1) // 2 - 1 for j in per_sequence) if per_sequence else 0
    return -(-jobs // sms) * span * SUMMARY_COST + max(steps, 0) * CHAIN_STEP


@functools.lru_cache(maxsize=256)
def summary_span(lengths: tuple[int, ...], chunk: int, piece_chunks: int, value_heads: int, sms: int) -> int:
    """The chunks each summary job walks for sequences of ``lengths`` tokens cut every
    ``piece_chunks`` chunks of ``chunk``: a piece where their jobs fit one wave, else a piece or a
    half or quarter of one (at least MIN_SPAN), whichever ``summary_time`` likes best (ties to the
    longer). Shorter spans mean more
    jobs and a longer entry chain, but a shorter last wave of jobs: B1×T32768 at HV32 has 160
    jobs of 128 chunks for 132 SMs, two waves of 128 chunks; of 64, 352 jobs in three of 64."""
    chunks = tuple(-(-length // chunk) for length in lengths)
    if value_heads * sum(summary_jobs(c, piece_chunks) for c in chunks) <= sms:
        return piece_chunks  # one wave already (``summary_tile`` splits it on value rows where it fits twice)
    spans = [piece_chunks >> i for i in range(3) if piece_chunks >> i >= MIN_SPAN] or [piece_chunks]
    return min(spans, key=lambda span: summary_time(chunks, piece_chunks, value_heads, sms, span))


def summary_tile(spec: CallSpec, piece_chunks: int, chunk: int) -> int:
    """The value rows a summary CTA walks for ``spec`` cut every ``piece_chunks`` chunks: 64 of a
    128-wide state when its (sequence, value head) pairs of equal lengths have so few summary jobs
    that twice their CTAs fill at most one wave (the halves run side by side on SMs that would
    idle; such jobs walk whole pieces, ``summary_span``), else 0, all of them. Packed lengths are
    not known when the programs are built."""
    if spec.dim_v != 128 or spec.mode == "varlen":
        return 0
    jobs = spec.batch * spec.value_heads * summary_jobs(-(-spec.tokens // chunk), piece_chunks)
    return 64 if 0 < 2 * jobs <= sm_count(spec.device, spec.arch) else 0


def plan_for(piece_chunks: int, chunk: int, value_heads: int, batch: int, seq_len: int,
             cu_seqlens: Optional[torch.Tensor], cu_seqlens_cpu: Optional[torch.Tensor],
             device: torch.device) -> PiecePlan:
    """The plan of one call: equal lengths, or packed ones known on the host (``cu_seqlens_cpu``);
    packed ones known only on the device (``cu_seqlens``, int32) are walked whole."""
    if cu_seqlens is None:
        return host_plan((seq_len,) * batch, piece_chunks, chunk, value_heads, device)
    if cu_seqlens_cpu is None:
        return whole_plan(cu_seqlens, value_heads)
    offsets = cu_seqlens_cpu.tolist()
    lengths = tuple(b - a for a, b in zip(offsets, offsets[1:]))
    return host_plan(lengths, piece_chunks, chunk, value_heads, device)

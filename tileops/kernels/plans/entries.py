"""The exact schedule of cut sequences: entry states of pieces from summaries of the pieces before them.

A span of tokens maps the state S at its first token to Φ S + R at its end: R is its walk from
zeros (the sequence's first span: from the initial state), Φ its transition, the walk of the
identity with v = 0. A summary job walks one span: a whole piece, or a half or quarter of one
where shorter jobs fill the SMs' waves better (``plans.pieces.summary_span``). Where a piece's
warm-up walk would reach back more than ``WARM_REACH`` chunks (``programs.warm_start`` decides it
on the device, per piece and value head, and then points the piece at its entry row instead), its
state comes from three launches whose time does not depend on the gates:

1. summaries (``programs.chunk_fused`` with ``summary``): one CTA per (job, value head), all at
   once: R of every span of the pieces that have a successor, Φ of those spans but the first; a
   job whose sequence has no piece pointed at its entry row for that head returns at once;
2. entries (``programs.piece_entries``): per cut sequence with such a piece, S_1 = R_0 and
   S_{r+1} = Φ_r S_r + R_r, each S_r that starts a piece written to its entry row (the others to
   the row of the sequence's first piece, which starts from the initial state and reads none);
3. the walk of every piece from its warm-up or its entry state: the pieces' program unchanged.

Entry states live in rows N + p of one tensor whose rows 0..N-1 are the initial state (N
sequences, p a piece of the plan), so that the walk reads one tensor. The tables depend only on
the lengths, like the plan's, and are built once per plan.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from tileops.kernels.plans.pieces import host_plan, to_device

ZEROS, IDENTITY = -1, -2  # a job's init_row: start from zeros, or walk the transition from the identity
# Chunks a piece may warm up before it takes the exact schedule's entry instead: fast-forgetting
# gates (the benchmarks', about e^-0.1 a token) need about 4, so they keep the cheaper warm-up.
WARM_REACH = 8


@dataclass(frozen=True)
class EntryPlan:
    """On the device, int32. Summary jobs, longest first: ``begin`` [J, HV] (the span's first
    token), ``end`` [J], ``init_rows`` [2, J, HV] (without and with an initial state: ``ZEROS``, the
    sequence's row of the initial state, or ``IDENTITY``), ``out_row`` [J] (the job's own row of the
    summaries) and ``job_chain`` [J] (its sequence's chain). Chains, one per cut sequence, padded
    with −1 beyond its spans: ``chain_piece`` [Q, M] (the piece that starts with the r-th span, or
    where that span starts inside a piece the sequence's first, whose entry row no walk reads;
    after the last span, the last piece), ``state_slot`` [Q, M] (the summary row of R of its r-th
    span) and ``transition_slot`` [Q, M] (of Φ, −1 for r = 0).
    ``sequences``: N, the initial state's rows ahead of the entries."""

    begin: torch.Tensor
    end: torch.Tensor
    init_rows: torch.Tensor
    out_row: torch.Tensor
    job_chain: torch.Tensor
    chain_piece: torch.Tensor
    state_slot: torch.Tensor
    transition_slot: torch.Tensor
    sequences: int
    pinned: tuple = ()

    @property
    def jobs(self) -> int:
        return self.end.shape[0]

    @property
    def chains(self) -> int:
        return self.chain_piece.shape[0]


def chains_of(plan_seq: list[int], plan_start: list[int]) -> dict[int, list[int]]:
    """The plan's pieces of each sequence, in the sequence's order (the plan runs longest first)."""
    pieces: dict[int, list[int]] = {}
    for p in sorted(range(len(plan_seq)), key=lambda p: (plan_seq[p], plan_start[p])):
        pieces.setdefault(plan_seq[p], []).append(p)
    return pieces


def entry_tables(seq: tuple[int, ...], start: tuple[int, ...], end: tuple[int, ...], value_heads: int,
                 span: int) -> tuple[torch.Tensor, ...]:
    """The host tables of ``EntryPlan`` for a plan's pieces (``seq``, ``start``, ``end`` in plan
    order), each summary job walking at most ``span`` tokens of a piece."""
    jobs = []  # (begin, end, init_row without, with an initial state, chain)
    chains = []
    for s, pieces in chains_of(list(seq), list(start)).items():
        if len(pieces) < 2:
            continue
        spans = [(lo, min(lo + span, end[p]), i) for i, p in enumerate(pieces[:-1])
                 for lo in range(start[p], end[p], span)]
        entered, state, transition = [pieces[0]], [], [-1]
        for r, (lo, hi, i) in enumerate(spans):
            state.append(len(jobs))
            jobs.append((lo, hi, ZEROS, s if r == 0 else ZEROS, len(chains)))
            if r:
                transition.append(len(jobs))
                jobs.append((lo, hi, IDENTITY, IDENTITY, len(chains)))
            # A state inside a piece goes to the row of the sequence's first piece, which no walk reads.
            entered.append(pieces[i + 1] if hi == end[pieces[i]] else pieces[0])
        chains.append((entered, state, transition))
    order = sorted(range(len(jobs)), key=lambda j: jobs[j][0] - jobs[j][1])  # stable: a span's R before its Φ
    slot = {j: i for i, j in enumerate(order)}
    job_table = torch.tensor([[jobs[j][f] for j in order] for f in range(5)],
                             dtype=torch.int32).reshape(5, len(order))
    width = max((len(c[0]) for c in chains), default=1)

    def padded(rows):
        return [row + [-1] * (width - len(row)) for row in rows]

    chain_table = torch.tensor([padded([c[0] for c in chains]), padded([[slot[j] for j in c[1]] for c in chains]),
                                padded([[slot[j] if j >= 0 else -1 for j in c[2]] for c in chains])],
                               dtype=torch.int32).reshape(3, len(chains), width)

    def per_head(t):
        return t.unsqueeze(-1).expand(*t.shape, value_heads).contiguous()

    return (per_head(job_table[0]), job_table[1].contiguous(), per_head(job_table[2:4]),
            torch.arange(len(order), dtype=torch.int32), job_table[4].contiguous(), *chain_table)


@functools.lru_cache(maxsize=64)
def entry_plan(lengths: tuple[int, ...], piece_chunks: int, chunk: int, value_heads: int,
               device: torch.device, span: int = 0) -> EntryPlan:
    """The exact schedule of the sequences with known ``lengths`` cut as ``plans.pieces.host_plan``
    cuts them, on ``device``, each summary job walking ``span`` chunks (0: a piece;
    ``plans.pieces.summary_span`` picks it)."""
    plan = host_plan(lengths, piece_chunks, chunk, value_heads, device)
    seq, start, end = (tuple(plan.pinned[0][row].tolist()) for row in (3, 0, 1))
    tables = entry_tables(seq, start, end, value_heads, (span or piece_chunks) * chunk)
    moved = [to_device(t, device) for t in tables]
    return EntryPlan(*(m[0] for m in moved), sequences=len(lengths), pinned=tuple(m[1] for m in moved))

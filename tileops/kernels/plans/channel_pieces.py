"""GLA's few long sequences, cut into pieces walked side by side, exactly, whatever the gates.

Without the delta rule a segment's transition is diagonal: the state entering piece p + 1 is
D_p ⊙ S_p + F_p, with S_p the state entering piece p, D_p the product of its windows' decays
(per key channel) and F_p its state walked from zero. So the chain walks every piece from zero at
once (its finals F_p), a short host loop forms the entries in sequence order, and the chain walks
every piece again from its entry, which gives the outputs and the final states. Two walks of a
piece's length replace one of the sequence's: a gain when a sequence is cut into more than two
pieces, which the call's (sequence, value head, V tile) walks leave room for when they are fewer
than the SMs. The first pass runs with the same cuts, so its per-piece decay rows match the
chain's (γ restarts at every window anyway: its products do not change).
"""

from __future__ import annotations

from typing import Optional

import torch

from tileops.callspec import CallSpec
from tileops.kernels.hardware import sm_count

MIN_WINDOWS = 16  # the fewest windows a piece spans: below, a walk is too short to pay for the second


def pieces_per_sequence(batch: int, windows: int, tiles: int, sms: int) -> int:
    """How many pieces to cut each of ``batch`` sequences of ``windows`` C-token windows into (1: no
    cut), for ``tiles`` CTAs a walk (value heads × V tiles): a power of two dividing ``windows``, so
    that the pieces' windows are whole, with the walks filling two CTAs an SM at most."""
    pieces = 1
    while (batch * tiles * pieces * 2 <= 2 * sms and windows % (pieces * 2) == 0
           and windows // (pieces * 2) >= MIN_WINDOWS):
        pieces *= 2
    return pieces if pieces > 2 else 1


def may_cut(spec: CallSpec, block_v: int, delta: bool) -> bool:
    """Whether some call of ``spec``'s program (any lengths) is cut: GLA's equal lengths with a
    key-major state, whose one long sequence leaves the SMs room (so the launcher compiles the
    cut's programs whatever the lengths it is first built for)."""
    if delta or spec.mode != "prefill" or spec.flag("state_v_first", False):
        return False
    return pieces_per_sequence(1, MIN_WINDOWS << 8, walk_tiles(spec, block_v), sm_count(spec.device, spec.arch)) > 1


def call_pieces(spec: CallSpec, chunk: int, block_v: int, delta: bool) -> int:
    """``pieces_per_sequence`` for a call (1 when it is not cut)."""
    if not may_cut(spec, block_v, delta) or spec.tokens % chunk:
        return 1
    return pieces_per_sequence(spec.batch, spec.tokens // chunk, walk_tiles(spec, block_v),
                               sm_count(spec.device, spec.arch))


def walk_tiles(spec: CallSpec, block_v: int) -> int:
    """The chain's CTAs a sequence: value heads × V tiles."""
    return spec.value_heads * (spec.dim_v // block_v)


def cut_bounds(batch: int, seq_len: int, pieces: int, device: torch.device) -> torch.Tensor:
    """The pieces' token offsets as packed sequences (int32 [batch · pieces + 1])."""
    return torch.arange(0, batch * seq_len + 1, seq_len // pieces, dtype=torch.int32, device=device)


def piece_entries(finals: torch.Tensor, window_decays: torch.Tensor, initial: Optional[torch.Tensor],
                  batch: int, pieces: int) -> torch.Tensor:
    """Each piece's entry state [batch · pieces, HV, K, V] from the pieces' states walked from zero
    (``finals``, same shape) and the decay of every window ([HV, windows, K], windows in token
    order, a whole number a piece): the sequence's initial state (zeros when ``initial`` is None)
    for its first piece, then D_p ⊙ S_p + F_p, D_p the product of piece p's window decays."""
    HV, windows, K = window_decays.shape
    piece_decay = window_decays.view(HV, batch, pieces, windows // (batch * pieces), K).prod(3)
    finals = finals.view(batch, pieces, *finals.shape[1:])
    entries = torch.empty_like(finals)
    entries[:, 0] = 0.0 if initial is None else initial
    for p in range(1, pieces):
        decay = piece_decay[:, :, p - 1].transpose(0, 1).unsqueeze(-1)  # [batch, HV, K, 1]
        torch.addcmul(finals[:, p - 1], decay, entries[:, p - 1], out=entries[:, p])  # one kernel a step
    return entries.view(batch * pieces, *finals.shape[2:])

"""KDA's and GLA's few long sequences, cut into pieces walked side by side, exactly, whatever the
gates.

The walk is affine in its state: the state entering piece p + 1 is Φ_p S_p + F_p, with S_p the
state entering piece p, F_p its state walked from zero and Φ_p its transition. Without the delta
rule (GLA) Φ_p is diagonal, D_p, the product of its segments' decays (per key channel); with it
(KDA) Φ_p is the piece walked from the identity with v = 0. So the chain walks every piece from
zero at once (its finals F_p), under the delta rule once more from the identity (its Φ_p), one
small program forms the entries in sequence order (``programs.channel_entries``), and the chain
walks every piece again from its entry, which gives the outputs and the final states.
WALKS[delta] walks of a piece replace one of the sequence: a gain when the longest sequence is
more than that many times the longest piece. Pieces end at window boundaries, so the decay row
of each window a piece covers is one of its segments', and the first pass, run with the same
cuts, forms the same products (γ restarts at every window anyway).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

import torch

from tileops.callspec import CallSpec
from tileops.kernels.hardware import sm_count
from tileops.kernels.plans.pieces import to_device

MIN_WINDOWS = 16  # the fewest windows a piece spans: below, a walk is too short to pay for the second
# The walks of a cut piece (from zero, [from the identity,] from its entry) and the chain's CTAs an
# SM (its shared memory: GLA's tiles fit two, KDA's K_x and T' one), without and with the delta rule.
WALKS = {False: 2, True: 3}
CHAINS_PER_SM = {False: 2, True: 1}


def piece_windows(lengths: tuple[int, ...], chunk: int, tiles: int, sms: int, delta: bool = False) -> int:
    """The windows a piece spans when sequences of ``lengths`` tokens are cut (0: no cut), for
    ``tiles`` CTAs a walk (value heads × V tiles): the pieces of all sequences about fill the
    chain's CTAs an SM, none shorter than MIN_WINDOWS, and the cut pays (the walks of a piece are
    shorter than the longest sequence's one)."""
    windows = [-(-n // chunk) for n in lengths]
    slots = max(CHAINS_PER_SM[delta] * sms // tiles, 1)
    width = max(MIN_WINDOWS, -(-sum(windows) // slots))
    return width if WALKS[delta] * width < max(windows, default=0) else 0


@dataclass(frozen=True)
class CutPlan:
    """Sequences of known lengths cut into pieces, on the device (int32). ``bounds``: the pieces as
    packed sequences [P + 1]; ``first`` and ``last``: each sequence's first and last piece [N].
    ``pinned``: the host tables the device ones were copied from (live while a CUDA graph replays
    the copies)."""

    bounds: torch.Tensor
    first: torch.Tensor
    last: torch.Tensor
    pinned: tuple

    @property
    def count(self) -> int:
        return self.bounds.shape[0] - 1


@functools.lru_cache(maxsize=64)
def cut_plan(lengths: tuple[int, ...], width: int, chunk: int, device: torch.device) -> CutPlan:
    """The pieces of sequences of ``lengths`` packed in that order, each cut at every ``width``-th
    window boundary after its first window's start."""
    bounds, first, last = [0], [], []
    start = 0
    for n in lengths:
        end = start + n
        first.append(len(bounds) - 1)
        cut = (start // chunk + width) * chunk
        while True:
            bounds.append(min(cut, end))
            if bounds[-1] == end:
                break
            cut += width * chunk
        last.append(len(bounds) - 2)
        start = end
    tables = [to_device(torch.tensor(x, dtype=torch.int32), device) for x in (bounds, first, last)]
    return CutPlan(*(device_table for device_table, _ in tables), tuple(host for _, host in tables))


def may_cut(spec: CallSpec, block_v: int, delta: bool) -> bool:
    """Whether some call of ``spec``'s program (any lengths) is cut: a prefill with a key-major
    state (K = V under the delta rule: Φ is a state), whose one long sequence leaves the SMs room
    (so the launcher compiles the cut's programs whatever the lengths it is first built for)."""
    if spec.mode not in ("prefill", "varlen") or spec.flag("state_v_first", False):
        return False
    if delta and spec.dim_k != spec.dim_v:
        return False
    return piece_windows((MIN_WINDOWS << 8,), 1, walk_tiles(spec, block_v), sm_count(spec.device, spec.arch),
                         delta) > 0


def call_width(spec: CallSpec, chunk: int, block_v: int, delta: bool,
               lengths: Optional[tuple[int, ...]] = None) -> int:
    """``piece_windows`` for a call (0 when it is not cut): equal lengths, or the ``lengths`` of a
    packed call (known on the host; without them it is not cut)."""
    if not may_cut(spec, block_v, delta):
        return 0
    if lengths is None:
        if spec.mode == "varlen":
            return 0
        lengths = (spec.tokens,) * spec.batch
    return piece_windows(lengths, chunk, walk_tiles(spec, block_v), sm_count(spec.device, spec.arch), delta)


def walk_tiles(spec: CallSpec, block_v: int) -> int:
    """The chain's CTAs a sequence: value heads × V tiles."""
    return spec.value_heads * (spec.dim_v // block_v)

"""Choosing a key's winner from its measured trials.

The fastest correct config wins only if it beats the default by more than the noise band (the
relative spread of the default timed twice, at least ``MIN_NOISE`` and at most ``MAX_NOISE``);
otherwise the default is recorded as the winner. The cap keeps a busy machine, whose two timings
of the default may differ several times over, from making every candidate lose: one twice as
fast as the default wins however noisy the default was. Ties break on the config's canonical JSON, so every worker that looks at
the same trials picks the same winner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from tileops.db.schemas import TrialRecord

MIN_NOISE = 0.02
MAX_NOISE = 0.5


@dataclass(frozen=True)
class Verdict:
    """The winning trial, the default's trial, and the band the winner had to clear."""

    winner: Optional[TrialRecord]
    default: Optional[TrialRecord]
    noise: float
    reason: str


def _rank(trial: TrialRecord) -> tuple:
    return (trial.median_ms, trial.config_json)


def choose_winner(trials: Sequence[TrialRecord], default_json: str) -> Verdict:
    """The verdict over every trial of one key."""
    correct = sorted((t for t in trials if t.status == "ok"), key=_rank)
    defaults = [t for t in correct if t.config_json == default_json]
    default = defaults[0] if defaults else None
    noise = min(MAX_NOISE, max([MIN_NOISE] + [t.noise for t in defaults if t.noise is not None]))
    if not correct:
        return Verdict(None, None, noise, "no candidate passed the correctness gate")
    best = correct[0]
    if default is None:
        return Verdict(best, None, noise, "the default config failed; the fastest correct config wins")
    if best.config_json != default_json and best.median_ms < default.median_ms * (1 - noise):
        return Verdict(best, default, noise, f"beats the default by more than the {noise:.1%} noise band")
    return Verdict(default, default, noise, f"nothing beat the default by more than the {noise:.1%} noise band")

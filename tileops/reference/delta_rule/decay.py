"""Cumulative log decays that keep a full reset exact.

A log decay of −inf (a decay factor of 0: the state is forgotten) is valid input. Summed into a
cumulative log decay it would make every later difference γ_i − γ_j a −inf − (−inf) = NaN, and
the NaN would spread through the chunk's products and solve. So the finite log decays are summed
on their own and the resets are counted beside them: the decay from j to i is exp(γ_i − γ_j) when
no reset lies in (j, i], and exactly 0 when one does.
"""

from __future__ import annotations

from typing import Union

import torch

Index = Union[int, slice, tuple]


class Decays:
    """Cumulative log decays along dim −2: ``total`` sums the finite log decays, ``resets`` counts
    the −inf ones. Indexing and reshaping act on both, so they slice like the tensor they stand for."""

    def __init__(self, total: torch.Tensor, resets: torch.Tensor) -> None:
        self.total, self.resets = total, resets

    @classmethod
    def cumulative(cls, g: torch.Tensor) -> "Decays":
        """The running sums of log decays ``g`` [..., C, D] along the chunk's C positions."""
        reset = torch.isneginf(g)
        return cls(g.masked_fill(reset, 0).cumsum(-2), reset.to(g.dtype).cumsum(-2))

    def __getitem__(self, index: Index) -> "Decays":
        return Decays(self.total[index], self.resets[index])

    def unsqueeze(self, dim: int) -> "Decays":
        return Decays(self.total.unsqueeze(dim), self.resets.unsqueeze(dim))

    @property
    def mT(self) -> "Decays":
        return Decays(self.total.mT, self.resets.mT)

    @property
    def shape(self) -> torch.Size:
        return self.total.shape

    def since(self, earlier: "Decays") -> torch.Tensor:
        """The log decay from ``earlier`` to these positions (broadcast): γ − γ_earlier, or −inf
        where a reset lies between them."""
        return (self.total - earlier.total).masked_fill(self.resets != earlier.resets, float("-inf"))

    def from_start(self) -> torch.Tensor:
        """The log decay from the chunk's start: γ, or −inf after a reset."""
        return self.total.masked_fill(self.resets > 0, float("-inf"))

"""The frozen description of one op call: everything a kernel choice or a compile depends on."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Flags that shape a compiled program but not its tuning. A scale is a constant in the kernel, yet
# the best tile shape does not depend on it. An initial state is a run-time argument of the
# prefill's programs, read once per sequence (within 3% on the H200), and a compile-time variant
# of the decode program, which it slows 1.8-1.9x (its read doubles the bytes) without changing the
# best config (the same winner and order of configs at B1, B64 and B256): one tuned row serves
# calls with and without a state. A per-channel gate in fp32 rather than the input dtype
# (``gate_dtype``) is read by the first pass alone, which has no tuned knob; a gate per head in
# either dtype and beta in 16 bits rather than fp32 (``beta_dtype``) are variants of the decode
# program only (the prefill widens them first).
UNTUNED_FLAGS = frozenset({"scale", "has_initial_state", "gate_dtype", "beta_dtype"})


@dataclass(frozen=True)
class CallSpec:
    """One validated call.

    ``op`` is the tuning family (deltanet, gdn, kda, gla); ``entry`` the op class that was called
    (e.g. ``GDNFwdOp``); ``mode`` is prefill, varlen or decode for the inference ops and
    chunk_fwd, chunk_bwd or step for the others. ``batch`` counts sequences (N), ``tokens`` is
    the per-sequence length for equal-length calls and the packed total for varlen. ``flags``
    holds the program-shaping settings as sorted (name, value) pairs.
    """

    op: str
    entry: str
    mode: str
    dtype: torch.dtype
    device: torch.device
    arch: str
    device_name: str
    batch: int
    tokens: int
    heads: int
    value_heads: int
    dim_k: int
    dim_v: int
    flags: tuple[tuple[str, object], ...] = ()

    def flag(self, name: str, default: object = None) -> object:
        """The value of one flag, or ``default`` when the call did not set it."""
        for key, value in self.flags:
            if key == name:
                return value
        return default

    @property
    def dtype_name(self) -> str:
        """The dtype as a short string (bfloat16, float16, float32, float64)."""
        return str(self.dtype).removeprefix("torch.")

    @property
    def gate_dtype(self) -> torch.dtype:
        """The dtype a gate (KDA's and GLA's per channel, GDN's per head) comes in: the input dtype
        unless the ``gate_dtype`` flag says otherwise (fp32)."""
        return getattr(torch, str(self.flag("gate_dtype", self.dtype_name)))

    @property
    def beta_dtype(self) -> torch.dtype:
        """The dtype beta comes in: fp32 unless the ``beta_dtype`` flag says otherwise (the input dtype)."""
        return getattr(torch, str(self.flag("beta_dtype", "float32")))

    @property
    def tuned_flags(self) -> tuple[tuple[str, object], ...]:
        """The flags that belong in a tuning key."""
        return tuple((k, v) for k, v in self.flags if k not in UNTUNED_FLAGS)

    @property
    def program_facts(self) -> tuple:
        """What a compiled kernel is specialised on: never the length or the number of sequences."""
        return (self.entry, self.mode, self.dtype_name, self.arch, self.heads, self.value_heads,
                self.dim_k, self.dim_v, self.flags)


def make_flags(**flags: object) -> tuple[tuple[str, object], ...]:
    """Sorted (name, value) pairs, dropping flags that were not set (None)."""
    return tuple(sorted((k, v) for k, v in flags.items() if v is not None))

"""A workload case: one representative call of an op (a family's inference op, or its training
step), as plain data that can cross a process boundary and be stored with a winner. The tuner, the
benchmarks and warm-up share it; ``tileops.tuner.cases`` turns a case back into an op and fresh
random inputs."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Optional

import torch

OP_CLASSES = {"deltanet": "DeltaNetFwdOp", "gdn": "GDNFwdOp", "kda": "KDAFwdOp", "gla": "GLAFwdOp"}
# A case's entry: None for the family's inference op (OP_CLASSES); "train" for its training step,
# the chunked forward and then the backward on the forward's saved tensors (DeltaNet's BHSD, GLA's
# BTHD; zero initial state), which a benchmark times as one; "train_fwd" and "train_bwd" for each
# op of that step alone, one kernel each: what the tuner tunes and a winner records as its call.
TRAIN_CLASSES = {"deltanet": {"train_fwd": "DeltaNetChunkFwdOp", "train_bwd": "DeltaNetChunkBwdOp"},
                 "gla": {"train_fwd": "GLAChunkFwdOp", "train_bwd": "GLAChunkBwdOp"}}
ENTRIES = ("train", "train_fwd", "train_bwd")
# Log decays a benchmark or tuning call draws its gates from: what the kernels whose speed depends
# on the gates are timed under. "benchmark": logsigmoid(N(0, 1)) / scale (about e^-0.1 a token for
# GDN and KDA's scale 8: the state forgets within a few chunks); "weak": about -1e-3 a token;
# "mamba": Mamba's initialisation, one rate per head (or per key channel), log-spaced from 1.6 to
# 0.001, times softplus of a N(0, 1) step over softplus(0); "zero": no decay (DeltaNet's gate);
# "steep": 8 to 16 a token, a state that forgets at once: beyond KDA's lower bound of 5, where a gate
# such as Kimi Linear's (-exp(A_log) · softplus, A up to 16) may go, and where the channel families'
# first pass forms its in-block pairs one by one (docs/kda-gated-products.md): their slowest data.
GATE_KINDS = ("benchmark", "weak", "mamba", "zero", "steep")
MAMBA_RATES = (1.6, 1e-3)


def log_decays(kind: str, shape: tuple, randn, rand, scale: float) -> torch.Tensor:
    """Log decays of ``shape`` [B, T, heads...] under gate kind ``kind``; ``randn`` and ``rand`` draw
    normal and uniform tensors of a shape (the caller's generator and device). This module imports
    nothing of the package, so a peer's process loads it by its file path."""
    if kind == "benchmark":
        return torch.nn.functional.logsigmoid(randn(shape)) / scale
    if kind == "weak":
        return -1e-3 * (0.5 + rand(shape))
    if kind == "mamba":
        lanes = 1
        for n in shape[2:]:
            lanes *= n
        hi, lo = (torch.tensor(r, dtype=torch.float64).log() for r in MAMBA_RATES)
        steps = torch.linspace(0.0, 1.0, lanes, dtype=torch.float64) if lanes > 1 else torch.zeros(1, dtype=torch.float64)
        rates = (hi + (lo - hi) * steps).exp().reshape(shape[2:])
        step = torch.nn.functional.softplus(randn(shape)) / torch.nn.functional.softplus(torch.zeros(()))
        return -rates.to(step) * step
    if kind == "zero":
        return torch.zeros_like(rand(shape))
    if kind == "steep":
        return -8.0 * (1.0 + rand(shape))
    raise ValueError(f"gate kind {kind!r} is not one of {', '.join(GATE_KINDS)}")
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class Case:
    """An op call: the op family, its constructor flags and the shapes of its inputs.

    ``batch`` is B for equal-length calls; ``seqlens`` (packed varlen) lists the sequence
    lengths, whose sum is the packed T. ``tokens`` == 1 without seqlens is decode. ``entry``
    names a training call (``ENTRIES``); None, the inference op, is left out of the JSON, so a
    case stored before entries existed reads and writes the same text.
    """

    op: str
    batch: int
    tokens: int
    heads: int
    value_heads: int
    dim: int
    dtype: str = "bfloat16"
    device: str = "cpu"
    seqlens: Optional[tuple[int, ...]] = None
    flags: tuple[tuple[str, Any], ...] = field(default=())
    entry: Optional[str] = None

    def __post_init__(self) -> None:
        if self.entry is None:
            return
        if self.entry not in ENTRIES:
            raise ValueError(f"case entry {self.entry!r} is not one of {', '.join(ENTRIES)} (or None: the inference op)")
        if self.op not in TRAIN_CLASSES:
            raise ValueError(f"{self.op} has no training ops; {', '.join(TRAIN_CLASSES)} has")
        if self.seqlens or self.value_heads != self.heads:
            raise ValueError(f"a {self.entry} case takes equal-length sequences with as many value heads as heads, "
                             f"not seqlens={self.seqlens}, heads={self.heads}, value_heads={self.value_heads}")

    @property
    def label(self) -> str:
        """A short human label: gdn prefill B4xT8192 H16/HV32 K128 bfloat16, deltanet train B4xT4096 ..."""
        kind = self.entry or ("decode" if self.tokens == 1 else "prefill")
        shape = f"varlen{len(self.seqlens)} T{sum(self.seqlens)}" if self.seqlens else f"{kind} B{self.batch}xT{self.tokens}"
        return f"{self.op} {shape} H{self.heads}/HV{self.value_heads} K{self.dim} {self.dtype}"

    @property
    def op_class(self) -> str:
        """The name of the op class this case calls (a training step calls two: see ``calls``)."""
        if self.entry is None:
            return OP_CLASSES[self.op]
        if self.entry == "train":
            raise ValueError(f"{self.label} calls two ops, {' then '.join(TRAIN_CLASSES[self.op].values())}: "
                             "take each from calls()")
        return TRAIN_CLASSES[self.op][self.entry]

    def calls(self) -> tuple["Case", ...]:
        """The single op calls the case is made of: a training step's forward and backward, else itself."""
        if self.entry == "train":
            return tuple(replace(self, entry=entry) for entry in TRAIN_CLASSES[self.op])
        return (self,)

    def to_json(self) -> str:
        """Canonical JSON text (stored beside a winner so that it can be rebuilt)."""
        data = asdict(self)
        if self.entry is None:
            del data["entry"]
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Case":
        data = json.loads(text)
        data["seqlens"] = tuple(data["seqlens"]) if data.get("seqlens") else None
        data["flags"] = tuple((k, v) for k, v in data.get("flags", ()))
        return cls(**data)

    def on(self, device: str) -> "Case":
        return replace(self, device=device)

    def smallest(self) -> "Case":
        """The same program with the fewest tokens: what a compile needs (lengths are run-time)."""
        if self.seqlens:
            return replace(self, seqlens=(1, 64), tokens=65)
        return replace(self, batch=1, tokens=min(self.tokens, 64))

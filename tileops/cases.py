"""A workload case: one representative call of an inference op, as plain data that can cross a
process boundary and be stored with a winner. The tuner, the benchmarks and warm-up share it;
``tileops.tuner.cases`` turns a case back into an op and fresh random inputs."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Optional

import torch

OP_CLASSES = {"deltanet": "DeltaNetFwdOp", "gdn": "GDNFwdOp", "kda": "KDAFwdOp", "gla": "GLAFwdOp"}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class Case:
    """An op call: the op family, its constructor flags and the shapes of its inputs.

    ``batch`` is B for equal-length calls; ``seqlens`` (packed varlen) lists the sequence
    lengths, whose sum is the packed T. ``tokens`` == 1 without seqlens is decode.
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

    @property
    def label(self) -> str:
        """A short human label: gdn prefill B4xT8192 H16/HV32 K128 bfloat16."""
        shape = (f"varlen{len(self.seqlens)} T{sum(self.seqlens)}" if self.seqlens else
                 f"{'decode' if self.tokens == 1 else 'prefill'} B{self.batch}xT{self.tokens}")
        return f"{self.op} {shape} H{self.heads}/HV{self.value_heads} K{self.dim} {self.dtype}"

    def to_json(self) -> str:
        """Canonical JSON text (stored beside a winner so that it can be rebuilt)."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

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

"""``explain``: which kernel and config a call would run, and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tileops.db.key import TuningKey
from tileops.dispatch.router import route


@dataclass(frozen=True)
class Explanation:
    """The decision for one call, printable."""

    op: str
    target: str
    kernel: Optional[str]
    key: Optional[TuningKey]
    config: Optional[dict]
    source: str
    passed_over: tuple[str, ...]
    notes: tuple[str, ...]
    plan: Optional[str] = None

    def __str__(self) -> str:
        lines = [f"{self.op} -> target {self.target}" + (f", kernel {self.kernel}" if self.kernel else "")]
        if self.key is not None:
            lines.append(f"  key:    {self.key}")
            lines.append(f"  config: {self.config} ({self.source})")
        if self.plan:
            lines.append(f"  plan:   {self.plan}")
        lines += [f"  passed over: {p}" for p in self.passed_over]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def explain(op: Any, *args: Any, **kwargs: Any) -> Explanation:
    """Describe the call ``op(*args, **kwargs)`` would make, without running or compiling it."""
    spec, _ = op.describe(*args, **kwargs)
    return explain_spec(type(op).__name__, op.target, spec)


def explain_spec(op_name: str, target: Optional[str], spec: Any) -> Explanation:
    """Describe the call of op class ``op_name`` that ``spec`` describes (for example a call on a GPU
    this machine lacks, from ``tileops.tuner.cases.spec_for_arch``)."""
    chosen = route(op_name, target, spec)
    if chosen.kernel is None:
        return Explanation(op_name, chosen.target, None, None, None, "external target", (), chosen.notes)
    sel = chosen.selection
    plan = chosen.kernel.plan(sel.config, spec) if chosen.kernel.plan else None
    return Explanation(op_name, chosen.target, chosen.kernel.name, sel.key, sel.config.model_dump(),
                       sel.source, sel.passed_over, chosen.notes, plan)

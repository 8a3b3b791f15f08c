"""Named shape presets: the workloads a tuning run covers, per op and architecture."""

from __future__ import annotations

import re
from dataclasses import replace

from tileops.cases import TRAIN_CLASSES, Case

# Qwen3-Next / Qwen3.5 GDN layers: 16 query-key heads, 32 value heads, 128-wide state.
_QWEN = dict(heads=16, value_heads=32, dim=128)
_MIXED16 = (4096, 1024, 3072, 512, 2048, 2560, 1536, 768, 3584, 256, 2304, 1280, 2048, 2816, 1792, 3072)
# Kimi Linear KDA layers: 32 heads, 128-wide state; 64 packed sequences of 128 to 1,024 tokens.
_KIMI = dict(heads=32, value_heads=32, dim=128)
_MIXED64 = tuple(128 + (i * 421) % 897 for i in range(64))
_H16 = dict(heads=16, value_heads=16, dim=128)

PRESETS: dict[str, dict[str, tuple[Case, ...]]] = {
    "qwen3-next": {
        "gdn": (
            Case("gdn", 1, 32768, **_QWEN), Case("gdn", 8, 4096, **_QWEN),
            Case("gdn", 4, 8192, heads=16, value_heads=16, dim=128),
            Case("gdn", 1, sum(_MIXED16), seqlens=_MIXED16, **_QWEN),
            Case("gdn", 1, 1, **_QWEN), Case("gdn", 64, 1, **_QWEN), Case("gdn", 256, 1, **_QWEN),
        ),
    },
    # With one long prompt on Kimi Linear's 32 heads over four GPUs (8 a GPU), the walks leave most
    # SMs idle: the row that times KDA's cut into pieces (plans.channel_pieces).
    "kimi-linear": {
        "kda": (Case("kda", 4, 8192, **_KIMI), Case("kda", 1, 32768, **_KIMI),
                Case("kda", 1, sum(_MIXED64), seqlens=_MIXED64, **_KIMI), Case("kda", 256, 1, **_KIMI),
                Case("kda", 1, 32768, heads=8, value_heads=8, dim=128)),
    },
    # DeltaNet and GLA layers of 16 heads over a 128-wide state: the rows their speed bars name, and
    # each one's training step (its chunked forward and backward: two kernels, two keys).
    "h16": {
        op: (Case(op, 4, 8192, **_H16), Case(op, 1, 32768, **_H16), Case(op, 256, 1, **_H16))
        + ((Case(op, 4, 4096, entry="train", **_H16),) if op in TRAIN_CLASSES else ())
        for op in ("deltanet", "gla")
    },
    "cpu-small": {
        op: (Case(op, 2, 256, heads=2, value_heads=4 if op in ("gdn", "kda") else 2, dim=32, dtype="float32"),
             Case(op, 8, 1, heads=2, value_heads=4 if op in ("gdn", "kda") else 2, dim=32, dtype="float32"))
        + ((Case(op, 2, 256, heads=2, value_heads=2, dim=32, dtype="float32", entry="train"),)
           if op in TRAIN_CLASSES else ())
        for op in ("deltanet", "gdn", "kda", "gla")
    },
}

DEFAULT_PRESET = {"cpu": "cpu-small"}
GPU_PRESET = {"gdn": "qwen3-next", "kda": "kimi-linear", "deltanet": "h16", "gla": "h16"}
_EXPLICIT = re.compile(r"^(?P<train>train-)?(?:B(?P<b>\d+)xT(?P<t>\d+)|varlen(?P<n>\d+)xT(?P<vt>\d+))"
                       r"xH(?P<h>\d+)(?:xHV(?P<hv>\d+))?$")


def explicit_case(op: str, text: str, dim: int, dtype: str) -> Case:
    """A case from text such as B4xT8192xH16xHV32, varlen16xT32768xH16xHV32 or, for the training
    step, train-B4xT4096xH16."""
    m = _EXPLICIT.match(text)
    if m is None:
        raise ValueError(f"shape {text!r} is neither a preset ({', '.join(PRESETS)}) nor of the form "
                         "B4xT8192xH16xHV32 / varlen16xT32768xH16xHV32 / train-B4xT4096xH16")
    h = int(m["h"])
    hv = int(m["hv"] or h)
    entry = "train" if m["train"] else None
    if m["n"]:
        n, total = int(m["n"]), int(m["vt"])
        lengths = tuple(total // n + (1 if i < total % n else 0) for i in range(n))
        return Case(op, 1, total, h, hv, dim, dtype, seqlens=lengths, entry=entry)
    return Case(op, int(m["b"]), int(m["t"]), h, hv, dim, dtype, entry=entry)


def preset_row(op: str, text: str) -> Case:
    """The row of a preset named as ``preset:shape`` (``qwen3-next:varlen16xT32768xH16xHV32``,
    ``h16:train-B4xT4096xH16``): the preset's own case, with its sequence lengths, where an explicit
    shape would make equal ones."""
    preset, _, shape = text.partition(":")
    if preset not in PRESETS:
        raise ValueError(f"{text!r}: no preset {preset!r} (presets: {', '.join(PRESETS)})")
    wanted = explicit_case(op, shape, 0, "")
    for case in PRESETS[preset].get(op, ()):
        sequences = len(case.seqlens) if case.seqlens else case.batch
        if ((case.entry, bool(case.seqlens), sequences, case.tokens, case.heads, case.value_heads) ==
                (wanted.entry, bool(wanted.seqlens), len(wanted.seqlens or ()) or wanted.batch, wanted.tokens,
                 wanted.heads, wanted.value_heads)):
            return case
    rows = ", ".join(c.label for c in PRESETS[preset].get(op, ()))
    raise ValueError(f"{text!r}: preset {preset!r} has no {op} row {shape!r} (its rows: {rows})")


def cases_for(op: str, arch: str, shapes: list[str], dim: int | None, dtype: str | None) -> list[Case]:
    """The cases of one op for the given preset names, preset rows (``preset:shape``) or explicit
    shapes (defaults per arch)."""
    names = shapes or [DEFAULT_PRESET.get(arch, GPU_PRESET[op])]
    out: list[Case] = []
    for name in names:
        if name in PRESETS:
            for case in PRESETS[name].get(op, ()):
                out.append(_override(case, dim, dtype))
        elif ":" in name:
            out.append(_override(preset_row(op, name), dim, dtype))
        else:
            out.append(explicit_case(op, name, dim or (32 if arch == "cpu" else 128),
                                     dtype or ("float32" if arch == "cpu" else "bfloat16")))
    if op == "gla":
        out = [c if c.value_heads == c.heads else _same_heads(c) for c in out]
    return out


def _override(case: Case, dim: int | None, dtype: str | None) -> Case:
    return replace(case, dim=dim or case.dim, dtype=dtype or case.dtype)


def _same_heads(case: Case) -> Case:
    return replace(case, value_heads=case.heads)

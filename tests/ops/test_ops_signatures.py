"""The ten op classes have exactly the constructor and forward signatures of the specification."""

from __future__ import annotations

import ast
import inspect
import os
import re
from pathlib import Path

import pytest

import tileops.linear_attention as la

POS = inspect.Parameter.POSITIONAL_OR_KEYWORD
KW = inspect.Parameter.KEYWORD_ONLY
NO_DEFAULT = inspect.Parameter.empty

# The specification beside the checkout, or where $TILEOPS_SPEC says (.ci/run finds it for a clone).
SPEC_PATH = Path(os.environ.get("TILEOPS_SPEC") or
                 Path(__file__).resolve().parents[2] / ".." / "shared" / "spec" / "linear_attention_ops.md")

TARGET = ("target", KW, None)
GATED_INIT = [("scale", POS, None), ("use_qk_l2norm_in_kernel", POS, False),
              ("use_beta_sigmoid_in_kernel", POS, False), ("allow_neg_eigval", POS, False),
              ("state_v_first", POS, False), ("use_gate_in_kernel", POS, False)]
GATED_FORWARD = [("q", POS, NO_DEFAULT), ("k", POS, NO_DEFAULT), ("v", POS, NO_DEFAULT), ("g", POS, NO_DEFAULT),
                 ("beta", POS, NO_DEFAULT), ("initial_state", POS, None), ("cu_seqlens", POS, None),
                 ("cu_seqlens_cpu", POS, None), ("A_log", POS, None), ("dt_bias", POS, None)]


def required(*names: str) -> list[tuple]:
    return [(n, POS, NO_DEFAULT) for n in names]


# (name, kind, default) of every parameter after ``self``, transcribed from the specification.
EXPECTED: dict[str, dict[str, list[tuple]]] = {
    "DeltaNetChunkFwdOp": {
        "__init__": [("chunk_size", POS, 64), TARGET],
        "forward": required("q", "k", "v", "beta"),
    },
    "DeltaNetChunkBwdOp": {
        "__init__": [("chunk_size", POS, 64), TARGET],
        "forward": required("do", "q", "k", "v", "beta", "S", "Aw", "Au", "w", "u"),
    },
    "DeltaNetRecurrentFwdOp": {
        "__init__": [TARGET],
        "forward": required("q", "k", "v", "beta", "state"),
    },
    "DeltaNetFwdOp": {
        "__init__": [("scale", POS, None), ("use_qk_l2norm_in_kernel", POS, False), TARGET],
        "forward": required("q", "k", "v", "beta") + [
            ("initial_state", POS, None), ("cu_seqlens", POS, None), ("cu_seqlens_cpu", POS, None)],
    },
    "GDNFwdOp": {
        "__init__": GATED_INIT + [TARGET],
        "forward": GATED_FORWARD,
    },
    "KDAFwdOp": {
        "__init__": GATED_INIT + [("lower_bound", POS, None), TARGET],
        "forward": GATED_FORWARD,
    },
    "GLAChunkFwdOp": {
        "__init__": [("chunk_size", POS, 64), ("scale", POS, -1.0), TARGET],
        "forward": required("q", "k", "v", "g") + [("initial_state", POS, None)],
    },
    "GLAChunkBwdOp": {
        "__init__": [("chunk_size", POS, 64), ("scale", POS, -1.0), ("has_initial_state", POS, False), TARGET],
        "forward": required("q", "k", "v", "g", "h", "do", "dht"),
    },
    "GLARecurrentFwdOp": {
        "__init__": [("scale", POS, -1.0), TARGET],
        "forward": required("q", "k", "v", "gk", "state"),
    },
    "GLAFwdOp": {
        "__init__": [("scale", POS, None), TARGET],
        "forward": required("q", "k", "v", "g") + [
            ("initial_state", POS, None), ("cu_seqlens", POS, None), ("cu_seqlens_cpu", POS, None)],
    },
}

OPS = sorted(EXPECTED)


def actual(cls: type, method: str) -> list[tuple]:
    params = list(inspect.signature(getattr(cls, method)).parameters.values())
    assert params[0].name == "self"
    return [(p.name, p.kind, p.default) for p in params[1:]]


def same(found: list[tuple], wanted: list[tuple]) -> bool:
    """Equal names, kinds and defaults; defaults compared by type as well (64 is not 64.0)."""
    return len(found) == len(wanted) and all(
        a[:2] == b[:2] and type(a[2]) is type(b[2]) and a[2] == b[2] for a, b in zip(found, wanted))


def test_all_ops_are_exported():
    assert sorted(EXPECTED) == sorted(n for n in la.__all__ if n.endswith("Op"))
    for name in EXPECTED:
        cls = getattr(la, name)
        assert inspect.isclass(cls) and cls.__name__ == name
        assert callable(cls.forward)


def test_builtin_and_reference_are_exported():
    assert "BUILTIN" in la.__all__
    assert la.BUILTIN == "builtin"
    assert la.REFERENCE == "reference"
    from tileops.linear_attention import BUILTIN, register_target, unregister_target  # noqa: F401


@pytest.mark.parametrize("method", ["__init__", "forward"])
@pytest.mark.parametrize("name", OPS)
def test_signature_matches_transcribed_spec(name, method):
    found = actual(getattr(la, name), method)
    assert same(found, EXPECTED[name][method]), f"{name}.{method}: {found} != {EXPECTED[name][method]}"


@pytest.mark.parametrize("name", OPS)
def test_target_is_keyword_only_and_last(name):
    params = list(inspect.signature(getattr(la, name).__init__).parameters.values())
    assert params[-1].name == "target" and params[-1].kind is KW and params[-1].default is None
    assert [p.name for p in params if p.kind is KW] == ["target"]
    with pytest.raises(TypeError):
        getattr(la, name)(*[p.default for p in params[1:-1]], None)


def parse_block(text: str) -> list[tuple]:
    """``__init__(a=1, *, target=None)`` body text -> [(name, kind, default)]."""
    kind, out = POS, []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item == "*":
            kind = KW
            continue
        name, eq, default = item.partition("=")
        out.append((name.strip(), kind, ast.literal_eval(default.strip()) if eq else NO_DEFAULT))
    return out


def parse_spec(text: str) -> dict[str, dict[str, list[tuple]]]:
    heads = list(re.finditer(r"^tileops\.linear_attention\.(\w+)\b", text, re.M))
    out = {}
    for i, head in enumerate(heads):
        body = text[head.end(): heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        entry = {}
        for method in ("__init__", "forward"):
            found = re.search(rf"^{method}\((.*?)\)", body, re.M | re.S)
            assert found, f"no {method}(...) block under {head.group(1)}"
            entry[method] = parse_block(found.group(1))
        out[head.group(1)] = entry
    return out


@pytest.fixture(scope="module")
def spec_signatures():
    if not SPEC_PATH.exists():
        pytest.skip(f"specification not found at {SPEC_PATH}")
    return parse_spec(SPEC_PATH.read_text(encoding="utf-8"))


def test_spec_documents_exactly_the_ten_ops(spec_signatures):
    assert sorted(spec_signatures) == OPS


def test_transcription_agrees_with_spec(spec_signatures):
    for name in OPS:
        for method in ("__init__", "forward"):
            assert same(EXPECTED[name][method], spec_signatures[name][method]), (name, method)


@pytest.mark.parametrize("method", ["__init__", "forward"])
@pytest.mark.parametrize("name", OPS)
def test_signature_matches_spec_file(spec_signatures, name, method):
    found = actual(getattr(la, name), method)
    assert same(found, spec_signatures[name][method]), f"{name}.{method}: {found} != {spec_signatures[name][method]}"


def test_parse_block_reads_kinds_and_defaults():
    assert parse_block("\n    chunk_size=64,\n    scale=-1.0,\n    *,\n    target=None\n") == [
        ("chunk_size", POS, 64), ("scale", POS, -1.0), ("target", KW, None)]
    assert parse_block("q, k,\n beta,\n") == required("q", "k", "beta")

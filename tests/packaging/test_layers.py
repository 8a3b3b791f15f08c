"""Layers point down: every import in the package, at the top of a module or inside a function,
goes to the module's own layer or one beneath it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Where each import package's files sit in the repository.
FOLDERS = {"tileops": "tileops", "tileops.db": "db", "tileops.dispatch": "dispatch",
           "tileops.tuner": "tuner", "tileops.cli": "cli"}
# Each layer and the layers it may import, its own included. ``base`` is what every layer shares:
# the call description, device facts, workload cases, warnings, targets and the reference.
MAY_IMPORT = {
    "base": {"base"},
    "kernels": {"base", "kernels"},
    "db": {"base", "db"},
    "dispatch": {"base", "kernels", "db", "dispatch"},
    "ops": {"base", "dispatch", "ops"},
    "tuner": {"base", "kernels", "db", "dispatch", "ops", "tuner"},
    "cli": {"base", "kernels", "db", "dispatch", "ops", "tuner", "cli"},
}
LAYER_OF = (("tileops.cli", "cli"), ("tileops.tuner", "tuner"), ("tileops.linear_attention", "ops"),
            ("tileops.functional", "ops"), ("tileops.library", "ops"), ("tileops.dispatch", "dispatch"),
            ("tileops.db", "db"), ("tileops.kernels", "kernels"), ("tileops", "base"))


def layer(module: str) -> str:
    return next(name for prefix, name in LAYER_OF if module == prefix or module.startswith(prefix + "."))


def modules() -> dict[str, Path]:
    """Every module of the package, by its import name."""
    found = {}
    for package, folder in FOLDERS.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            if package == "tileops" and parts[0] in FOLDERS.values():
                continue
            name = ".".join((package, *parts))
            found[name.removesuffix(".__init__")] = path
    return found


def imported(name: str, path: Path) -> set[str]:
    """The tileops modules that ``path`` (module ``name``) imports anywhere in its body."""
    out = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
            out |= {f"{base}.{alias.name}" if base == "tileops" else base for alias in node.names}
    return {m for m in out if m == "tileops" or m.startswith("tileops.")}


def test_the_walk_sees_every_folder():
    found = modules()
    for package in FOLDERS:
        assert package in found
    assert "tileops.dispatch.router" in found and "tileops.cli.db" in found


@pytest.mark.parametrize("name", sorted(modules()))
def test_imports_point_down(name):
    path = modules()[name]
    own = layer(name)
    upward = sorted(m for m in imported(name, path) if layer(m) not in MAY_IMPORT[own])
    assert not upward, f"{name} ({own}) imports from a layer above it: {upward}"


def test_an_upward_import_is_caught(tmp_path):
    """The walk itself: a db module importing dispatch is reported."""
    path = tmp_path / "bad.py"
    path.write_text("def f():\n    from tileops.dispatch.key import key_for\n")
    assert layer("tileops.db.bad") == "db"
    assert "dispatch" not in MAY_IMPORT["db"]
    assert imported("tileops.db.bad", path) == {"tileops.dispatch.key"}

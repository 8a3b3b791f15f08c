"""The hash a kernel's tuning rows carry: its code as Python parses it, not as it is written.

A kernel is built from its registering modules and every ``tileops.kernels`` module they import,
at the top or inside a function, transitively (the registry, the config base and this module
aside). Each is parsed without being imported (no TileLang, no compiler); docstrings and bare
strings are dropped, imports skipped, and every other top-level statement is dumped without
positions (comments and layout are not in the tree) and keyed by the name it defines. The hash
covers the sorted (name, dump) pairs: a docstring, a comment, a reformat or a move of a
definition to another module keeps it; a change to what any definition computes (a program, a
launch parameter, a tile, a default) changes it.

Parsing takes a fifth of a second, so a hash is kept (``kernels.kept``) under the package's files
as they are (``package_stamp``, their bytes) and a later process with the same files reads it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import re
from pathlib import Path
from typing import Iterable, Optional

from tileops.kernels.kept import kept_root, read_json, write_json

PACKAGE = "tileops.kernels"
# Modules every kernel imports that describe, keep or load kernels rather than build them.
INFRASTRUCTURE = frozenset({f"{PACKAGE}.base", f"{PACKAGE}.config", f"{PACKAGE}.registry", f"{PACKAGE}.code_hash",
                            f"{PACKAGE}.kept", f"{PACKAGE}.launch.compiled"})


ROOT = Path(__file__).resolve().parent  # the folder of PACKAGE
BUILDER = re.compile(r"tileops\.kernels(\.\w+)+:\w+")


def module_path(name: str, root: Path = ROOT) -> Optional[Path]:
    """The source file of kernel module ``name`` under ``root`` (found, not imported), or None."""
    if not name.startswith(PACKAGE + "."):
        return None
    path = root.joinpath(*name[len(PACKAGE) + 1:].split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(tree: ast.Module, root: Path = ROOT) -> set[str]:
    """The ``tileops.kernels`` modules a module imports anywhere in its code, and those it names
    as a program's builder (a ``"module:function"`` string: ``launch.compiled`` imports it)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and BUILDER.fullmatch(node.value):
            found.add(node.value.split(":")[0])
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(PACKAGE):
            found.add(node.module)
            # ``from package import module`` names a module too
            found.update(f"{node.module}.{alias.name}" for alias in node.names
                         if module_path(f"{node.module}.{alias.name}", root))
    return {name for name in found if name.startswith(PACKAGE + ".") and name not in INFRASTRUCTURE}


def without_strings(node: ast.AST) -> ast.AST:
    """``node`` with every statement that is a bare string (a docstring) removed."""
    for child in ast.walk(node):
        body = getattr(child, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            kept = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                            and isinstance(s.value.value, str))]
            child.body = kept or [ast.Pass()]
    return node


def defined_name(statement: ast.stmt) -> str:
    """The name a top-level statement defines ('' for one that defines none)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return statement.name
    targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
    return ",".join(ast.unparse(t) for t in targets if t is not None)


def dump(node: object) -> str:
    """A syntax tree as text, the same on every Python version: ``ast.dump`` is not (3.12 adds
    ``type_params`` to every definition, 3.13 leaves out empty fields), so empty fields are left
    out here on all of them."""
    if isinstance(node, ast.AST):
        fields = (f"{name}={dump(value)}" for name in node._fields
                  if (value := getattr(node, name, None)) is not None and value != [])
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return f"[{', '.join(dump(item) for item in node)}]"
    return repr(node)


def definitions(path: Path) -> list[tuple[str, str]]:
    """(name, dump) of every top-level statement of a module but its imports."""
    tree = without_strings(ast.parse(path.read_text(encoding="utf-8")))
    return [(defined_name(s), dump(s)) for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))]


def kernel_modules(roots: Iterable[str], root: Path = ROOT) -> list[str]:
    """The roots and every kernel module they import, transitively, sorted."""
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        path = module_path(name, root)
        if name in seen or path is None:
            continue
        seen.add(name)
        todo.extend(imported_modules(ast.parse(path.read_text(encoding="utf-8")), root))
    return sorted(seen)


def code_hash(roots: Iterable[str], *extra: str, root: Path = ROOT) -> str:
    """sha256 (16 hex digits) of the definitions of the modules ``roots`` build from (the package's
    files under ``root``), and of ``extra``."""
    pairs = sorted(pair for name in kernel_modules(roots, root) for pair in definitions(module_path(name, root)))
    digest = hashlib.sha256()
    for part in (*extra, *(f"{name}\0{dump}" for name, dump in pairs)):
        digest.update(part.encode())
        digest.update(b"\1")
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def package_stamp(root: Path = ROOT) -> str:
    """sha256 of the bytes of every file of the package under ``root``: any edit changes it."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\1")
    return digest.hexdigest()


def kept_code_hash(roots: Iterable[str], *extra: str) -> str:
    """``code_hash(roots, *extra)``, read from the hashes kept for the package's current files when
    there, else computed and kept."""
    roots = tuple(roots)
    path = kept_root() / "code-hash" / f"{package_stamp()[:32]}.json"
    name = hashlib.sha256("\0".join((*roots, "", *extra)).encode()).hexdigest()[:32]
    known = read_json(path).get(name)
    if known is None:
        known = code_hash(roots, *extra)
        write_json(path, dict(read_json(path), **{name: known}))  # with what other processes kept meanwhile
    return known

"""The kernel layers point one way: families build on the shared layer, never on each other."""

from __future__ import annotations

import ast

from tileops.kernels.code_hash import ROOT, imported_modules

SHARED = ("blocks", "programs", "plans", "launch")


def modules() -> dict[str, set[str]]:
    """Every kernel module under tileops/kernels and the kernel modules it imports."""
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(("tileops", "kernels") + (parts[:-1] if parts[-1] == "__init__" else parts))
        found[name] = imported_modules(ast.parse(path.read_text()))
    return found


def family(module: str):
    """The family folder a module belongs to (gdn, kda, ...), or None for the shared layer."""
    parts = module.split(".")
    folder = parts[2] if len(parts) > 2 else None
    return folder if folder and (ROOT / folder).is_dir() and folder not in SHARED else None


def test_families_import_only_the_shared_layer_and_themselves():
    crossings = [(module, target) for module, targets in modules().items() for target in targets
                 if family(target) is not None and family(target) != family(module)]
    assert crossings == []


def test_the_shared_layer_imports_no_family():
    shared = {m: t for m, t in modules().items() if m.split(".")[2:3] and m.split(".")[2] in SHARED}
    assert shared and all(family(target) is None for targets in shared.values() for target in targets)


def test_no_kernel_module_imports_itself_through_others():
    graph = modules()
    done, on_path, cycles = set(), [], []

    def visit(module):
        if module in on_path:
            cycles.append(on_path[on_path.index(module):] + [module])
            return
        if module in done:
            return
        on_path.append(module)
        for target in sorted(graph.get(module, set()) - {module}):  # a package naming its own modules
            visit(target)
        on_path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
    assert cycles == []

"""The package's structure: folders follow the data flow, imports only run downward, no circles,
thin notebooks. A structure scan of every `import` under lib/ddlstudy (function-level ones too)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "lib" / "ddlstudy"

# Bottom to top: a module may import from its own layer or any layer below, never above.
# Claims sit below chapters: they read chapter tables by name (the chapter registry, a leaf),
# and a chapter states a paper's claim through them, so every page shows one verdict.
LAYERS = ["registry", "host", "records", "workload", "collectives", "strategies", "cluster",
          "network", "testbeds", "config", "analysis", "train", "frameworks", "experiments",
          "claims", "chapters", "report", "cli", "bench"]
# `python -m ddlstudy.X` entry points kept from the flat layout: they only forward to a command.
SHIMS = {"netem", "costmodel", "conclusions", "params", "data", "replay"}
# Leaf registries any layer may read: they import nothing but ddlstudy.registry.
LEAVES = {"ddlstudy.chapters.registry", "ddlstudy.network.profiles"}
MAX_LINES = 600  # a module longer than this says why at its top ("long because: ...")
MAX_NOTEBOOK_CODE_LINES = 60


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports_of(path: Path, name: str) -> set[str]:
    """Every ddlstudy module `path` imports (absolute names, function-level imports included)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ddlstudy")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if not base.startswith("ddlstudy"):
                continue
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    known = modules()
    return {m for m in found if m in known and m != name}


def layer(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "ddlstudy"


def graph() -> dict[str, set[str]]:
    return {name: imports_of(path, name) for name, path in modules().items()}


def test_every_module_sits_in_a_layer():
    stray = [n for n in modules()
             if layer(n) not in LAYERS + ["ddlstudy", "__main__", *SHIMS]]
    assert not stray, f"modules outside the layers {LAYERS}: {stray}"


def test_imports_only_run_downward():
    up = []
    for name, deps in graph().items():
        if layer(name) in [*SHIMS, "ddlstudy"] or name.endswith("__main__"):
            continue  # entry points (`python -m ...`) sit above everything by nature
        for dep in deps:
            if layer(dep) in ("ddlstudy",) or dep in LEAVES:
                continue
            if LAYERS.index(layer(dep)) > LAYERS.index(layer(name)):
                up.append(f"{name} -> {dep}")
    assert not up, "imports that run up a layer:\n" + "\n".join(sorted(up))


def test_leaf_registries_import_only_the_registry_base():
    g = graph()
    for leaf in LEAVES:
        assert g[leaf] <= {"ddlstudy.registry"}, f"{leaf} imports {g[leaf]}"


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            # a package's __init__ importing its own submodules is not a circle of code
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    # Child -> parent-package edges count: `from ddlstudy.pkg import mod` inside pkg/ runs
    # pkg/__init__, which may import the child back (siblings import by full module path).
    g = graph()
    assert not _cycles(g), f"import circles: {_cycles(g)}"


def test_scan_sees_a_child_importing_its_package(tmp_path):
    child = tmp_path / "cells.py"
    child.write_text("from ddlstudy.analysis.costmodel import step\n")
    assert "ddlstudy.analysis.costmodel" in imports_of(child, "ddlstudy.analysis.costmodel.cells")


def test_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert not _cycles({"a": {"b"}, "b": set()})


def test_long_modules_say_why():
    long = [f"{n} ({len(p.read_text().splitlines())} lines)" for n, p in modules().items()
            if len(p.read_text().splitlines()) > MAX_LINES
            and "long because:" not in p.read_text()[:3000].lower()]
    assert not long, f"modules over {MAX_LINES} lines without a reason at the top: {long}"


def notebook_code_lines(path: Path) -> int:
    cells = json.loads(path.read_text())["cells"]
    lines = ["".join(c["source"]).splitlines() for c in cells if c["cell_type"] == "code"]
    return sum(1 for cell in lines for ln in cell if ln.strip() and not ln.strip().startswith("#"))


@pytest.mark.parametrize("nb", sorted((REPO / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_notebooks_are_thin(nb):
    n = notebook_code_lines(nb)
    assert n <= MAX_NOTEBOOK_CODE_LINES, f"{nb.name}: {n} code lines (goal <= 60)"

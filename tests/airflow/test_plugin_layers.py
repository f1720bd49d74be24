"""The plugin's parts import one way (``ui`` -> ``tasks`` -> ``reporting`` -> ``maintenance_dags``) and no module
imports itself back through another: read from the source, so a circle is caught before Airflow loads anything."""
from __future__ import annotations

import ast
import pathlib

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.unit

PACKAGE = REPO / "plugins" / "storage_maintenance"
# Lowest first; a module may import its own part and the ones before it. plugin.py sits above every part.
PARTS = ["maintenance_dags", "reporting", "tasks", "ui"]


def _name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> set[str]:
    """The plugin modules ``path`` imports, at the top or inside a function, resolved to dotted names."""
    name = _name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    modules = {_name(p) for p in PACKAGE.rglob("*.py")}
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m != name}


def _part(module: str) -> int | None:
    parts = module.split(".")
    return PARTS.index(parts[1]) if len(parts) > 1 and parts[1] in PARTS else None


def test_the_plugin_parts_import_only_downward():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = _part(_name(path))
        if own is None:
            continue
        for imported in sorted(_imports(path)):
            target = _part(imported)
            if target is not None and target > own:
                upward.append(f"{path.relative_to(REPO)} imports {imported}")
    assert not upward, "imports that run upward:\n" + "\n".join(upward)


def test_no_plugin_module_imports_itself_back():
    graph = {_name(p): _imports(p) for p in PACKAGE.rglob("*.py")}
    assert len(graph) > 20 and graph["storage_maintenance.ui.app"] >= {"storage_maintenance.ui.console",
                                                                         "storage_maintenance.ui.storage_view"}
    circles = []
    for start in sorted(graph):
        stack, seen = [(start, [start])], set()
        while stack:
            module, path = stack.pop()
            for nxt in graph.get(module, ()):
                if nxt == start:
                    circles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert not circles, "import circles:\n" + "\n".join(circles)

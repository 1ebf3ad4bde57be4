"""The package's layering: no import cycles between modules, and trainers independent of policies.

Imports inside functions count too: a cycle that only closes at run time is still a cycle a
reader has to untangle.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports() -> dict[str, set[str]]:
    """Module -> the coevo modules it imports (a package import counts as its __init__)."""
    paths = {module_name(p): p for p in SRC.glob("coevo/**/*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package `level - 1` steps up
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                # `from coevo.methods import run` imports the submodule when there is one.
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names
                ]
            else:
                continue
            found.update(t for t in targets if t in paths and t != name)
        graph[name] = found
    return graph


def test_no_module_imports_itself_round_about():
    graph = imports()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_trainers_import_nothing_from_the_policy_package():
    graph = imports()
    leaks = {
        (module, target)
        for module, targets in graph.items()
        if module.startswith("coevo.train")
        for target in targets
        if target.startswith("coevo.policy")
    }
    assert leaks == set()

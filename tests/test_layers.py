"""The layering of ARCHITECTURE.md, read from the source: who may import whom, and no import cycles."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("runtime", "ingest", "spec", "server", "cluster")
#: package -> the packages of ours it may import
ALLOWED = {
    "runtime": set(),
    "ingest": {"runtime"},
    "spec": {"runtime"},
    "server": {"runtime", "ingest", "spec"},
    "cluster": {"runtime", "ingest", "spec", "server"},
    "bench": {"runtime", "ingest", "spec", "server", "cluster", "bench"},
}


def _imports() -> dict[str, set[str]]:
    """Module name -> the modules of ours it imports (any import statement, at any depth)."""
    graph: dict[str, set[str]] = {}
    for package in (*PACKAGES, "bench"):
        for path in (ROOT / package).rglob("*.py"):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            targets = set()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    targets |= {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    targets.add(node.module)
                    targets |= {f"{node.module}.{alias.name}" for alias in node.names}
            graph[module] = {t for t in targets if t.split(".")[0] in (*PACKAGES, "bench", "tests")}
    return graph


def test_each_layer_imports_only_the_layers_below_it():
    graph = _imports()
    bad = [
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if target.split(".")[0] not in ALLOWED[module.split(".")[0]] | {module.split(".")[0]}
    ]
    assert not bad, bad


def test_no_import_cycles():
    graph = _imports()
    modules = {m: {t for t in ts if t in graph and t != m} for m, ts in graph.items()}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(modules[module]):
            if state.get(target) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path[path.index(target) :], target]))
            if target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(modules):
        if module not in state:
            visit(module, [module])

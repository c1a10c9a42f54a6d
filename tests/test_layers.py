"""The layering of ARCHITECTURE.md, read from the source: who may import whom, the order of the
server's rooms, no web framework below the API room, and no import cycles."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("runtime", "ingest", "spec", "store", "server", "cluster", "testkit")
#: The server's rooms, in order: each may import the rooms before it (server/__init__.py).
ROOMS = ("server.config", "server.engine", "server.service", "server.api", "server.tools")
BELOW = ("runtime", "ingest", "spec", "store")
#: package (or server room) -> the packages and rooms of ours it may import
ALLOWED = {
    "runtime": set(),
    "ingest": {"runtime"},
    "spec": {"runtime"},
    "store": {"runtime", "ingest"},  # above ingest/: the store keeps what ingestion made; ingest/ never imports it
    **{room: {*BELOW, *ROOMS[:i]} for i, room in enumerate(ROOMS)},
    "server": {*BELOW, *ROOMS},  # server/__main__.py and server/__init__.py
    "cluster": {*BELOW, *ROOMS},
    "testkit": {*BELOW, *ROOMS},
    "bench": {*BELOW, *ROOMS, "server", "cluster", "testkit"},
}
#: Web frameworks only the API room (and what sits above it) may import.
WEB = ("fastapi", "starlette")


def _room(module: str) -> str:
    """The package of a module, or its room for server/ (server/__main__.py, server/__init__.py: "server")."""
    parts = module.split(".")
    if parts[0] == "server" and len(parts) > 1 and f"server.{parts[1]}" in ROOMS:
        return f"server.{parts[1]}"
    return parts[0]


def _imports(external: bool = False) -> dict[str, set[str]]:
    """Module name -> the modules it imports (any import statement, at any depth): ours, or with
    ``external`` every top-level package."""
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
            ours = (*PACKAGES, "bench", "tests")
            graph[module] = targets if external else {t for t in targets if t.split(".")[0] in ours}
    return graph


def test_each_layer_imports_only_the_layers_below_it():
    graph = _imports()
    bad = [
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if _room(target) not in ALLOWED[_room(module)] | {_room(module)}
    ]
    assert not bad, bad


def test_the_rooms_below_the_api_import_no_web_framework():
    """The engine and the configuration never import FastAPI or Starlette: the API room maps their
    errors to HTTP (server/api/handlers.py)."""
    graph = _imports(external=True)
    bad = [
        (module, target)
        for module, targets in graph.items()
        if _room(module) in ("server.config", "server.engine", "server.service", "store", "ingest", "spec", "runtime")
        for target in targets
        if target.split(".")[0] in WEB
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


def test_only_the_scheduler_writes_its_lists():
    """The waiting queue, the running questions and the ingest slot are the scheduler's: they are
    private to server/engine/scheduler.py, and nothing else reaches into them."""
    private = re.compile(r"\._(waiting|running|ingesting)\b")
    offenders = [
        path.relative_to(ROOT)
        for path in (ROOT / "server").rglob("*.py")
        if path.name != "scheduler.py" and private.search(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, offenders

"""The tree is the architecture: folder-level imports form no cycle (lazy imports inside functions count), each
layer imports only the layers below it, and drivers reach planners and targets only through the registries.

Folders are the subpackages of ``a2acc`` (``model``, ``ir``, ``planners``, ...); top-level modules (``pipeline``,
``errors``, ...) count as folders of their own and ``a2acc`` itself is the facade.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"compiler": "a2acc", "backends": "a2acc.backends", "runtime_patches": "a2acc.runtime"}

#: what each folder may never import, with why
FORBIDDEN = {
    "analysis": {
        "planners",
        "pipeline",
        "studies",
        "backends",
        "jit",
        "cli",
        "runtime",
    },  # below the planners
    "planners": {"pipeline", "studies", "backends", "jit", "cli", "runtime"},  # emit Programs, nothing else
    "backends": {"planners", "pipeline", "analysis", "studies", "jit", "cli", "runtime"},  # read Programs
    "ir": {"planners", "pipeline", "analysis", "studies", "backends", "jit", "cli", "runtime", "flows"},
    "model": {
        "ir",
        "planners",
        "pipeline",
        "analysis",
        "studies",
        "backends",
        "jit",
        "cli",
        "runtime",
        "flows",
    },
    "flows": {"ir", "planners", "pipeline", "analysis", "studies", "backends", "jit", "cli", "runtime"},
    "pipeline": {"studies", "jit", "cli", "runtime"},
}
#: drivers reach planners and targets through the registries (a2acc.planners, a2acc.backends), never a module
REGISTRY_ONLY = ("cli", "studies", "jit", "runtime", "pipeline", "a2acc")
ALLOWED_INSIDE = {"a2acc.backends.target"}  # the Target protocol and what it hands back


def _modules() -> Iterator[tuple[str, Path]]:
    for folder, pkg in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            yield ".".join([pkg, *parts]), path


def _imports(path: Path) -> Iterator[str]:
    """Every a2acc module ``path`` imports, at the top or inside a function."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "a2acc":
            if node.module == "a2acc":
                yield from (f"a2acc.{a.name}" for a in node.names if not a.name.startswith("__"))
                if any(a.name.startswith("__") for a in node.names):
                    yield "a2acc"
            else:
                yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == "a2acc")


def _folder(module: str) -> str:
    for pkg, name in (("a2acc.backends", "backends"), ("a2acc.runtime", "runtime")):
        if module == pkg or module.startswith(pkg + "."):
            return name
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "a2acc"


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    g = nx.DiGraph()
    for mod, path in _modules():
        for target in _imports(path):
            a, b = _folder(mod), _folder(target)
            if a != b:
                g.add_edge(a, b)
                g.edges[a, b].setdefault("where", []).append(f"{path.relative_to(ROOT)} -> {target}")
    return g


def test_no_import_cycle_between_folders(graph):
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, [
        [graph.edges[c[i], c[(i + 1) % len(c)]]["where"][0] for i in range(len(c))] for c in cycles
    ]


def test_each_layer_imports_only_what_is_below_it(graph):
    bad = [
        w
        for folder, never in FORBIDDEN.items()
        for other in never
        if graph.has_edge(folder, other)
        for w in graph.edges[folder, other]["where"]
    ]
    assert not bad, bad


def test_drivers_reach_planners_and_targets_only_through_the_registries():
    bad = [
        f"{path.relative_to(ROOT)} -> {target}"
        for mod, path in _modules()
        if _folder(mod) in REGISTRY_ONLY
        for target in _imports(path)
        if target.startswith(("a2acc.planners.", "a2acc.backends.")) and target not in ALLOWED_INSIDE
    ]
    assert not bad, bad


def test_the_replay_layer_imports_nothing_that_decides():
    """``a2acc.runtime.launch`` (bound launches, the hot path) is below ``a2acc.runtime.decide`` and the engine:
    what to run is decided there, how to run it here."""
    bad = [
        f"{path.relative_to(ROOT)} -> {target}"
        for mod, path in _modules()
        if mod.startswith("a2acc.runtime.launch")
        for target in _imports(path)
        if target.startswith(("a2acc.runtime.decide", "a2acc.runtime.engine", "a2acc.runtime.executors"))
        or target in ("a2acc.runtime.counters", "a2acc.runtime.torch_patch", "a2acc.runtime.settings")
    ]
    assert not bad, bad
    assert any(mod.startswith("a2acc.runtime.launch.") for mod, _p in _modules())  # the check saw the package

"""The package import graph: every arrow points down a declared layer order, no circle.

The graph is built from the source (``ast``), not from what happens to be imported at
run time, so an import inside a function counts like one at the top of a module. A node
is a top-level part of ``simulator`` (a subpackage, or a module such as ``api``); an
arrow ``a -> b`` means some module of ``a`` imports something of ``b``. Packages of one
layer may not import each other; a package may import any layer below its own.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "simulator"

# bottom first
LAYERS: list[set[str]] = [
    {"errors", "version"},
    {"precision"},
    {"io", "optional"},
    {"config"},
    {"hardware", "moe", "schedules"},
    {"collectives", "compute", "engine", "shape"},
    {"memory"},
    {"workload"},
    {"metrics"},
    {"api"},
    {"reliability", "validation", "report", "sensitivity"},
    {"sweep"},
    {"capacity"},
    {"studies", "calibrate"},
    {"web"},
    {"cli"},
    {"__main__", "__init__"},
]
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _node(path: Path) -> str:
    rel = path.relative_to(ROOT).parts
    return rel[0].removesuffix(".py")


def _imports(path: Path) -> list[tuple[str, int]]:
    """Absolute ``simulator.*`` modules imported by ``path`` (at any depth), with lines."""
    rel = path.relative_to(ROOT.parent).with_suffix("").parts
    package = list(rel if path.name == "__init__.py" else rel[:-1])
    if path.name == "__init__.py":
        package = package[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
                if not node.module:  # ``from . import x``: x may be a module
                    out += [(f"{name}.{a.name}", node.lineno) for a in node.names]
                    continue
            else:
                name = node.module or ""
            out.append((name, node.lineno))
    return [(n if n != "simulator" else "simulator.__init__", line) for n, line in out
            if n == "simulator" or n.startswith("simulator.")]


def _target(name: str) -> str:
    """The node a ``simulator.*`` import lands on: a subpackage or module, else (a name
    the root package defines, such as ``from .. import __version__``) the root itself."""
    part = name.split(".")[1]
    exists = (ROOT / part).is_dir() or (ROOT / f"{part}.py").is_file()
    return part if exists else "__init__"


def package_graph() -> dict[tuple[str, str], list[str]]:
    """``(from, to) -> ["file:line", ...]`` over every module of ``simulator``."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        src = _node(path)
        for name, line in _imports(path):
            dst = _target(name)
            if dst != src:
                edges[(src, dst)].append(f"{path.relative_to(ROOT.parent)}:{line}")
    return dict(edges)


def _cycles(edges) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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

    for v in sorted(set(graph) | {b for _, b in edges}):
        if v not in index:
            visit(v)
    return out


def test_every_package_has_a_layer():
    nodes = {_node(p) for p in ROOT.rglob("*.py")}
    assert nodes - set(LEVEL) == set(), "add the new package to LAYERS"


def test_no_arrow_up_or_sideways():
    edges = package_graph()
    assert len(edges) > 50  # the graph was read (sanity: it has about 90 arrows)
    bad = {f"{a} -> {b}": where[:3] for (a, b), where in edges.items()
           if LEVEL[b] >= LEVEL[a]}
    assert bad == {}


def test_no_circle():
    assert _cycles(package_graph()) == []


def test_the_checks_see_an_arrow_up_and_a_circle():
    """The checks themselves: a made-up arrow from engine to api is up and closes a circle."""
    edges = {**package_graph(), ("engine", "api"): ["made up"]}
    assert LEVEL["api"] > LEVEL["engine"]
    assert any({"api", "engine"} <= set(c) for c in _cycles(edges))

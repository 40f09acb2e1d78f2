"""The import graph of varmq and its adapters, read from their source (nothing is imported).

Every ``import`` and ``from ... import`` is an edge, of one of three kinds: made when the module
is imported (``"module"``), inside a function (``"function"``), or under ``if TYPE_CHECKING:``
(``"typing"``). ``from package import name`` is an edge to the submodule ``package.name`` when
there is one, else to the package.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "varmq": ROOT / "varmq",
    "sqliteq": ROOT / "adapters" / "sqliteq",
    "redisq": ROOT / "adapters" / "redisq",
}


@dataclass
class Graph:
    """Modules by dotted name (with their files) and the edges between them."""

    files: dict[str, Path] = field(default_factory=dict)
    # (importer, imported) -> the kinds of import that make the edge
    edges: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    # importer -> top-level names of the modules it imports that are not in the graph
    outside: dict[str, set[str]] = field(default_factory=dict)

    def targets(self, module: str, kinds: frozenset[str] = frozenset()) -> set[str]:
        """What ``module`` imports, by edges of ``kinds`` (every kind when empty)."""
        return {b for (a, b), k in self.edges.items() if a == module and (not kinds or k & kinds)}


def read_graph() -> Graph:
    graph = Graph()
    for package, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            graph.files[".".join([package, *parts])] = path
    for module, path in graph.files.items():
        is_package = path.name == "__init__.py"
        for imported, kind in _imports(ast.parse(path.read_text()), module, is_package):
            target = _known(graph, imported)
            if target is None:
                graph.outside.setdefault(module, set()).add(imported.split(".")[0])
            elif target != module:
                graph.edges.setdefault((module, target), set()).add(kind)
    return graph


def _known(graph: Graph, name: str) -> str | None:
    parts = name.split(".")
    while parts:
        if ".".join(parts) in graph.files:
            return ".".join(parts)
        parts.pop()
    return None


def _imports(tree: ast.Module, module: str, is_package: bool) -> Iterator[tuple[str, str]]:
    def visit(nodes: list[ast.stmt], kind: str) -> Iterator[tuple[str, str]]:
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield alias.name, kind
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, is_package, node.level, node.module)
                for alias in node.names:
                    yield f"{base}.{alias.name}", kind
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                yield from visit(node.body, "typing")
                yield from visit(node.orelse, kind)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from visit(node.body, "typing" if kind == "typing" else "function")
            else:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.stmt):
                        yield from visit([child], kind)

    yield from visit(tree.body, "module")


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def cycles(graph: Graph, modules: set[str]) -> list[list[str]]:
    """The strongly connected groups of more than one module among ``modules``, every kind of
    edge counted (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.targets(v) & modules):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(modules):
        if v not in index:
            connect(v)
    return found


def longest_chain(graph: Graph, modules: set[str]) -> list[str]:
    """The longest chain of imports made when modules are imported (``"module"`` edges), not
    passing through a package's ``__init__``: the depth of the import structure."""
    inner = {m for m in modules if graph.files[m].name != "__init__.py"}
    best: dict[str, list[str]] = {}

    def chain(v: str) -> list[str]:
        if v not in best:
            below = [chain(w) for w in graph.targets(v, frozenset({"module"})) & inner]
            best[v] = [v, *max(below, key=len, default=[])]
        return best[v]

    return max((chain(m) for m in inner), key=len, default=[])

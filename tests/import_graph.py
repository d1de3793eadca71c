"""The static import graph of the project's packages, and the rules it must keep.

Read from the source with :mod:`ast`, nothing is imported. An edge is one
``import`` statement between two modules of the scanned packages: imports at
module level and inside functions (a lazy import still runs, and can still
close a cycle) count; imports under ``if TYPE_CHECKING:`` do not (they never
run). ``from pkg import name`` points at the submodule ``pkg.name`` when
there is one, else at ``pkg`` itself.

Three checks, each returning human-readable violations (empty: all kept):
:func:`find_cycles` (no module reaches itself), :func:`layer_violations`
(top-level packages import only downwards) and :func:`rule_violations`
(subpackages import only what their rules allow).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Edge:
    """One import statement from ``source`` to ``target`` (dotted module names).

    ``line`` is the statement's line in ``source``; ``lazy`` says it sits inside
    a function (it runs on the first call, not at import time).
    """

    source: str
    target: str
    line: int
    lazy: bool

    def __str__(self) -> str:
        where = " (inside a function)" if self.lazy else ""
        return f"{self.source}:{self.line} imports {self.target}{where}"


Graph = dict[str, list[Edge]]
"""Module name -> the edges leaving it (every scanned module is a key)."""


def module_files(roots: Mapping[str, Path]) -> dict[str, Path]:
    """Every module of the given packages.

    A package's ``tests/`` folder (``workflows/tests/``) holds its tests, not its
    modules: they are left out (a test may import any layer to build its world).

    Args:
        roots: top-level package name -> its folder (the one holding ``__init__.py``).

    Returns:
        Dotted module name -> file; a package is named by its ``__init__.py``.
    """
    files: dict[str, Path] = {}
    for top, folder in roots.items():
        for path in sorted(folder.rglob("*.py")):
            relative = path.relative_to(folder)
            if "tests" in relative.parts[:-1]:
                continue
            parts = [top, *relative.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    return files


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _known(name: str, modules: set[str]) -> str | None:
    """The longest prefix of ``name`` that is a scanned module (None: outside them)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, modules: set[str]) -> None:
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.modules = modules
        self.edges: list[Edge] = []
        self._depth = 0  # functions we are inside

    def _add(self, target: str | None, node: ast.stmt) -> None:
        if target is not None and target != self.module:
            self.edges.append(Edge(self.module, target, node.lineno, self._depth > 0))

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for stmt in node.orelse:  # the body never runs; an else branch does
                self.visit(stmt)
            return
        self.generic_visit(node)

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(_known(alias.name, self.modules), node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            origin = ".".join([*base, node.module] if node.module else base)
        else:
            origin = node.module or ""
        for alias in node.names:
            submodule = f"{origin}.{alias.name}"
            target = submodule if submodule in self.modules else _known(origin, self.modules)
            self._add(target, node)


def build_graph(roots: Mapping[str, Path]) -> Graph:
    """The import graph between the modules of ``roots`` (see :func:`module_files`).

    Imports of anything outside the scanned packages (stdlib, third party)
    are left out.
    """
    files = module_files(roots)
    names = set(files)
    graph: Graph = {}
    for module, path in files.items():
        collector = _Collector(module, path.name == "__init__.py", names)
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        graph[module] = collector.edges
    return graph


def find_cycles(graph: Graph) -> list[str]:
    """Every import cycle, one line each: its modules in order and the statements closing it.

    Finds the strongly connected components (Tarjan, iteratively) and, for
    each with more than one module, walks one cycle through it to name.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    targets = {m: sorted({e.target for e in out if e.target in graph}) for m, out in graph.items()}
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(targets[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(targets[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return [_describe_cycle(graph, component) for component in components]


def _describe_cycle(graph: Graph, component: list[str]) -> str:
    """One shortest cycle through the component's first module, with its statements."""
    members = set(component)
    start = component[0]
    reached_by: dict[str, Edge] = {}
    frontier = [start]
    while frontier:  # breadth first inside the component, back to ``start``
        following = []
        for node in frontier:
            for edge in graph[node]:
                if edge.target not in members:
                    continue
                if edge.target == start:
                    chain = [edge]
                    while chain[0].source != start:
                        chain.insert(0, reached_by[chain[0].source])
                    names = [e.source for e in chain] + [start]
                    return " -> ".join(names) + "  [" + "; ".join(map(str, chain)) + "]"
                if edge.target not in reached_by:
                    reached_by[edge.target] = edge
                    following.append(edge.target)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {component}")  # not a component


def layer_violations(graph: Graph, layers: list[str]) -> list[str]:
    """Imports from a top-level package to one above it.

    Args:
        graph: see :func:`build_graph`.
        layers: top-level package names, lowest first (e.g. the queue library
            before the application); a package may import its own and lower ones.
    """
    rank = {name: i for i, name in enumerate(layers)}
    found = []
    for edges in graph.values():
        for edge in edges:
            source, target = edge.source.split(".")[0], edge.target.split(".")[0]
            if source in rank and target in rank and rank[target] > rank[source]:
                found.append(f"{edge}: {source} may not import {target}")
    return found


def package_of(module: str, top: str) -> str:
    """The subpackage of ``top`` that ``module`` belongs to (``top`` itself for its __init__)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == top and len(parts) > 1 else parts[0]


def rule_violations(graph: Graph, top: str, allowed: Mapping[str, Iterable[str]]) -> list[str]:
    """Imports between subpackages of ``top`` that the rules do not allow.

    Args:
        graph: see :func:`build_graph`.
        top: the top-level package whose subpackages the rules govern (``orders``).
        allowed: subpackage -> the subpackages (or single modules) of ``top`` it
            may import, besides itself. ``top`` itself is a key too (its
            ``__init__``). A subpackage missing from the rules is a violation:
            a new package states its rules before it lands.

    Returns:
        One line per offending import statement or unruled subpackage.
    """
    rules = {package: set(targets) for package, targets in allowed.items()}
    found = []
    for module in sorted(graph):
        if module.split(".")[0] == top and package_of(module, top) not in rules:
            found.append(f"{module}: package {package_of(module, top)} has no import rules")
    for edges in graph.values():
        for edge in edges:
            if edge.source.split(".")[0] != top or edge.target.split(".")[0] != top:
                continue
            source, target = package_of(edge.source, top), package_of(edge.target, top)
            if source == target or source not in rules:
                continue
            if not any(edge.target == m or edge.target.startswith(m + ".") for m in rules[source]):
                found.append(f"{edge}: {source} may not import {target}")
    return found

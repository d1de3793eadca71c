"""The import graph keeps its shape: no cycle, imports run downwards, packages keep their rules.

Layers, lowest first: ``reliable_queue`` (imports neither of the others),
``workflows`` (never imports ``orders``), ``orders``. Inside ``orders`` each
package may import only the packages its ``__init__`` docstring names
(:data:`ORDERS_RULES` is that table; a test holds the two together). The
checks themselves are proven on a planted graph first, so a check that can
no longer fail is caught too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from import_graph import (
    Graph,
    build_graph,
    find_cycles,
    layer_violations,
    module_files,
    package_of,
    rule_violations,
)

REPO = Path(__file__).resolve().parents[2]
ROOTS = {
    "reliable_queue": REPO / "queue" / "src" / "reliable_queue",
    "workflows": REPO / "workflows",
    "orders": REPO / "orders",
}
LAYERS = ["reliable_queue", "workflows", "orders"]

INTERFACES_AND_RUNS = ["orders.observability", "orders.web", "orders.demo", "orders.chaos"]
ORDERS_RULES: dict[str, list[str]] = {
    "orders": [],
    "orders.domain": [],
    "orders.sources": ["orders.domain"],
    # The one module-level allowance: a leaf (checked below) that masks credentials.
    "orders.app": ["orders.domain", "orders.sources", "orders.observability.urls"],
    "orders.observability": ["orders.domain", "orders.app"],
    "orders.worker": ["orders.domain", "orders.app", "orders.observability"],
    "orders.web": ["orders.domain", "orders.app", "orders.observability"],
    "orders.demo": ["orders.domain", "orders.sources", "orders.app", "orders.worker"],
    "orders.chaos": ["orders.domain", "orders.sources", "orders.app", "orders.worker"],
    "orders.cli": [
        "orders.domain",
        "orders.sources",
        "orders.app",
        "orders.worker",
        *INTERFACES_AND_RUNS,
    ],
}
"""orders package -> what else of orders it may import (packages, or single modules)."""

NO_REDIS = ["orders.domain", "orders.sources"]
"""Packages that may not import ``reliable_queue``: the domain and its input know no queue."""


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph(ROOTS)


# --- the checks catch what they are for (a planted tree) -------------------------------------

PLANTED = {
    "low/__init__.py": "",
    "low/a.py": "import top.loop.x\n",  # upward: low is below top
    "low/tests/unit/test_a.py": "import top.loop.x\n",  # a package's tests: not scanned
    "top/__init__.py": "",
    "top/loop/__init__.py": "",
    "top/loop/x.py": "from top.loop.y import f\n",
    # lazy, inside a function: still closes the cycle x -> y -> x
    "top/loop/y.py": "def f():\n    from top.loop import x\n    return x\n",
    "top/loop/z.py": (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from top.ui import v\n"  # never runs: no edge
        "else:\n    from . import x\n"  # runs: an edge, relative
    ),
    "top/core/__init__.py": "",
    "top/core/m.py": "from top.ui import v\n",  # core may not import ui
    "top/core/n.py": "from top.ui.leaf import mask\n",  # ...except its one allowed leaf
    "top/ui/__init__.py": "",
    "top/ui/v.py": "from top.core import n\n",
    "top/ui/leaf.py": "def mask(s):\n    return s\n",
    "top/extra/__init__.py": "",  # a package without rules
}
PLANTED_RULES = {
    "top": [],
    "top.loop": [],
    "top.core": ["top.ui.leaf"],
    "top.ui": ["top.core"],
}


@pytest.fixture
def planted(tmp_path: Path) -> Graph:
    for name, text in PLANTED.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return build_graph({"low": tmp_path / "low", "top": tmp_path / "top"})


def test_planted_graph_has_the_edges_the_source_says(planted: Graph) -> None:
    edges = {(e.source, e.target, e.lazy) for es in planted.values() for e in es}
    assert ("top.loop.y", "top.loop.x", True) in edges  # function-level import counted
    assert ("top.loop.z", "top.loop.x", False) in edges  # relative import resolved
    assert not any(e.target == "top.ui.v" for e in planted["top.loop.z"])  # TYPE_CHECKING only


def test_a_planted_cycle_through_a_lazy_import_is_found(planted: Graph) -> None:
    [cycle] = find_cycles(planted)
    assert cycle.startswith("top.loop.x -> top.loop.y -> top.loop.x")
    assert "top.loop.y:2 imports top.loop.x (inside a function)" in cycle


def test_a_planted_upward_import_is_found(planted: Graph) -> None:
    assert layer_violations(planted, ["low", "top"]) == [
        "low.a:1 imports top.loop.x: low may not import top"
    ]
    assert layer_violations(planted, ["top", "low"]) == []


def test_planted_imports_against_the_rules_are_found(planted: Graph) -> None:
    assert rule_violations(planted, "top", PLANTED_RULES) == [
        "top.extra: package top.extra has no import rules",
        "top.core.m:1 imports top.ui.v: top.core may not import top.ui",
    ]


# --- the project keeps them -------------------------------------------------------------------


def test_no_import_cycle_between_modules(graph: Graph) -> None:
    assert find_cycles(graph) == []


def test_imports_run_down_the_layers(graph: Graph) -> None:
    """orders -> workflows -> reliable_queue; never the other way."""
    assert layer_violations(graph, LAYERS) == []


def test_orders_packages_import_only_what_their_rules_allow(graph: Graph) -> None:
    assert rule_violations(graph, "orders", ORDERS_RULES) == []


def test_domain_and_sources_import_no_queue(graph: Graph) -> None:
    found = [
        str(edge)
        for module, edges in graph.items()
        if package_of(module, "orders") in NO_REDIS
        for edge in edges
        if edge.target.split(".")[0] == "reliable_queue"
    ]
    assert found == []


def test_package_rules_form_no_cycle() -> None:
    """Packages can be read bottom-up: the rules between whole packages are a DAG."""
    remaining = {p: {t for t in ts if t in ORDERS_RULES} for p, ts in ORDERS_RULES.items()}
    while remaining:
        ready = [p for p, ts in remaining.items() if not ts & remaining.keys()]
        assert ready, f"the package rules go round: {sorted(remaining)}"
        for package in ready:
            del remaining[package]


def test_single_module_allowances_are_leaves(graph: Graph) -> None:
    """A module a lower package may import imports nothing of orders itself."""
    leaves = {t for ts in ORDERS_RULES.values() for t in ts if t not in ORDERS_RULES}
    assert leaves == {"orders.observability.urls"}
    for leaf in leaves:
        assert [str(e) for e in graph[leaf] if e.target.startswith("orders")] == []


def _docstring(path: Path) -> str | None:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("package", sorted(p for p in ORDERS_RULES if p != "orders"))
def test_package_docstring_states_what_it_may_import(package: str) -> None:
    path = REPO / Path(*package.split(".")) / "__init__.py"
    doc = " ".join((_docstring(path) or "").split())
    assert "may import" in doc, f"{package}: its docstring says nothing of its imports"
    unnamed = [t for t in ORDERS_RULES[package] if f"``{t}``" not in doc]
    assert unnamed == [], f"{package}: the docstring does not name {unnamed}"


def test_every_public_module_has_a_docstring() -> None:
    missing = [
        name
        for name, path in module_files(ROOTS).items()
        if not name.rpartition(".")[2].startswith("_") and not _docstring(path)
    ]
    assert missing == []

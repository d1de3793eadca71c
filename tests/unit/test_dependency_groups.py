"""The default install stays small: browser and lint tools live in their own groups."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    return requirement.split(">")[0].split("=")[0].split("[")[0].split("<")[0].strip()


def test_default_group_holds_only_what_the_tests_need() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    groups = project["dependency-groups"]
    default = {_name(r) for g in project["tool"]["uv"]["default-groups"] for r in groups[g]}
    assert not default & {"playwright", "ruff", "mypy"}
    assert "playwright" in {_name(r) for r in groups["browser"]}
    assert {"ruff", "mypy"} <= {_name(r) for r in groups["lint"]}


def test_ci_installs_the_browser_and_lint_groups() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert "--group browser --group lint" in ci

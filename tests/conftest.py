"""Test tree root. The shared fixtures live in ``orderflow_fixtures`` (see its docstring)."""

pytest_plugins = [
    "orderflow_fixtures",
    "cluster_fixtures",
    "leak_check",
    "database_fixtures",
    "api_world",
]

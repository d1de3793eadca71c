"""Queue library tests use the project's shared fixtures (tests/orderflow_fixtures.py)."""

pytest_plugins = ["orderflow_fixtures"]

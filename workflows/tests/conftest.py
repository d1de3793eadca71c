"""``workflows`` package tests use the project's shared fixtures (tests/orderflow_fixtures.py).

Tiers: ``unit/`` needs no service; ``integration/`` runs against a real database (a
SQLite file, or PostgreSQL with ``TEST_DATABASE_URL``). The workflow tables come from
the application's migrations, so the database fixtures (tests/database_fixtures.py)
build the schema and catalog with ``orders``; ``workflows`` itself never imports it.
"""

pytest_plugins = ["orderflow_fixtures", "cluster_fixtures", "leak_check", "database_fixtures"]

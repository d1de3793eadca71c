"""``python -m benchmarks peers | orderflow ...``: see ``--help``."""

from benchmarks.cli import app

app()

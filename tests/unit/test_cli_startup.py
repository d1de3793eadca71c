"""``orders --help`` starts at once: subcommands are imported only when they run.

The target is under 0.3 s of CPU for ``orders --help`` (Typer itself is most of
it); the bound asserted here is generous because CI machines are shared. The
real guard is the list of heavy packages that listing commands must not import.
"""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest
from cli_processes import orders_command

from orders.cli.main import COMMANDS, Entry, app, load

HEAVY = ("sqlalchemy", "redis", "rich", "pydantic", "orders.app", "orders.chaos", "reliable_queue")


def _child_cpu(args: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0, proc.stderr
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def test_orders_help_imports_no_command_module_and_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "from orders.cli.main import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print([m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m in {HEAVY!r}"
        " or m.startswith('orders.cli.') and m != 'orders.cli.main'])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_orders_help_costs_little_cpu() -> None:
    best = min(_child_cpu([*orders_command(), "--help"]) for _ in range(3))
    assert best < 0.8, f"orders --help took {best:.2f} s of CPU (target 0.3 s)"


@pytest.mark.parametrize("entry", COMMANDS, ids=[e.name for e in COMMANDS])
def test_listed_help_is_the_first_line_of_the_commands_own_help(entry: Entry) -> None:
    command = load(entry)
    own = " ".join((command.help or "").split("\n\n")[0].split())
    assert own == entry.help


def test_every_command_is_listed_and_runs_its_help() -> None:
    from typer.testing import CliRunner

    listing = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"})
    assert listing.exit_code == 0
    for entry in COMMANDS:
        assert f"  {entry.name} " in listing.output
    for entry in COMMANDS:
        shown = CliRunner().invoke(app, [entry.name, "--help"], env={"COLUMNS": "80"})
        assert shown.exit_code == 0, shown.output
        assert "<bool>" not in shown.output and "{" not in shown.output.split("\n")[1:3][0]
        assert max(len(line) for line in shown.output.splitlines()) <= 80

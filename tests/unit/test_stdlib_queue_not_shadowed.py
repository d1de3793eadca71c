"""The repo's ``queue/`` folder must never shadow the standard library ``queue`` module."""

import subprocess
import sys
import sysconfig
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()


def test_import_queue_in_tests_is_the_stdlib_module():
    import queue

    assert Path(queue.__file__).resolve().parent == STDLIB
    assert hasattr(queue, "Queue") and hasattr(queue, "SimpleQueue")
    assert not any(name.startswith("queue.") for name in sys.modules)


def test_import_queue_with_repo_root_first_on_sys_path_is_the_stdlib_module():
    code = "import sys; sys.path.insert(0, sys.argv[1]); import queue; print(queue.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code, str(REPO_ROOT)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(out.stdout.strip()).resolve().parent == STDLIB


def test_queue_folder_has_no_init_file():
    assert not (REPO_ROOT / "queue" / "__init__.py").exists()


def test_reliable_queue_is_importable_from_the_workspace_member():
    import reliable_queue

    assert Path(reliable_queue.__file__).resolve().is_relative_to(REPO_ROOT / "queue" / "src")

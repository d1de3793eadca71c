"""Worker processes write metrics to per-slot files, and a restarted one reuses a slot."""

from __future__ import annotations

from pathlib import Path

from orders.observability.multiproc import claim_slot


def test_running_processes_hold_distinct_slots_and_a_freed_slot_is_reused(
    tmp_path: Path,
) -> None:
    first, first_lock = claim_slot(tmp_path)
    second, second_lock = claim_slot(tmp_path)
    assert (first, second) == ("slot0", "slot1")
    first_lock.close()  # the process holding slot 0 exited
    again, again_lock = claim_slot(tmp_path)
    assert again == "slot0"
    second_lock.close()
    again_lock.close()

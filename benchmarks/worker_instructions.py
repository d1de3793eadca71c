"""Instructions a worker process spends per drained job (callgrind), Redis left out.

Runs itself under ``valgrind --tool=callgrind`` with instrumentation off until the
loop starts, then counts the instructions of BATCHES rounds of what a worker lane
does per batch of 100 jobs on canned bytes (no Redis: its time is measured by
``drain_instructions.py``): hiredis parses a fetch reply (100 jobs, each with its
id, lease token, delivery count and record), ``parse_fetches`` turns it into jobs,
the lane runs them (no-op handler, no middleware) and builds their settlement
calls, and the calls and the next fetch are packed into one write; the batches run
under a shared hold of the worker's lane gate, kept between batches as a lane keeps
it while no lane waits to run alone. The start-up
heap is frozen first, as ``Worker.run`` does (``--no-freeze``: not, as the code
before that did). Instruction counts are stable under
machine load, wall-clock is not; imports only ``reliable_queue`` (and redis-py,
hiredis), so it also measures an older checkout run with its own interpreter.
Usage::

    python benchmarks/worker_instructions.py [BATCHES] [--no-freeze]

Prints Ir per job.
"""

from __future__ import annotations

import gc
import glob
import os
import random
import subprocess
import sys
import tempfile

JOBS = 100  # per batch
RECORD = b'{"t":"noop","p":{},"e":1764600000000,"m":5,"k":null}'


def _resp(items: list[int | bytes]) -> bytes:
    out = [b"*%d\r\n" % len(items)]
    for x in items:
        out.append(b":%d\r\n" % x if isinstance(x, int) else b"$%d\r\n%s\r\n" % (len(x), x))
    return b"".join(out)


def _reply(batch: int, header: list[int]) -> bytes:
    items: list[int | bytes] = list(header)
    for i in range(JOBS):
        token = b"%d:host:1234:abcd" % (batch * JOBS + i)
        items += [b"01JDEXAMPLE%05d%05d" % (batch, i), token, 1, RECORD]
    return _resp(items)


def _measured(batches: int, freeze: bool) -> None:
    """The loop counted under callgrind (see the module docstring)."""
    import hiredis
    import redis
    from redis.connection import Connection

    from reliable_queue import TaskRegistry, Worker
    from reliable_queue.heartbeat import LaneRun
    from reliable_queue.job import FetchResult

    registry = TaskRegistry()
    registry.task("noop")(lambda payload, ctx: None)
    worker = Worker(
        redis.Redis(port=1),  # never connected
        ["bench"],
        registry,
        prefix="bench",
        batch_size=JOBS,
        rng=random.Random(1),
        worker_id="host:1234:abcd",
    )
    queue = worker.queues[0]
    lane = LaneRun(queue)
    conn = Connection()
    fetch = queue.fetch_calls(JOBS, 30.0, worker.worker_id)[:1]
    # an older checkout's fetch reply has no suspect_waiting field, nor its worker a gate
    header = [-1, 0, 0, 0] if "suspect_waiting" in FetchResult.__dataclass_fields__ else [-1, 0, 0]
    gate = getattr(worker, "gate", None)
    ticket = lane.ticket if gate is not None else None
    raws = [_reply(b, header) for b in range(batches)]
    if freeze:
        gc.collect()
        gc.freeze()
    subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], capture_output=True)
    pending: list = []
    if gate is not None:  # a lane keeps its shared hold between batches while no lane waits
        gate.try_shared(ticket)
    for raw in raws:
        reader = hiredis.Reader()
        reader.feed(raw)
        result = queue.parse_fetches([reader.gets()])
        calls = pending + fetch
        conn.pack_commands(
            [("EVALSHA", queue.scripts.sha(c.script), len(c.keys), *c.keys, *c.args) for c in calls]
        )
        pending = worker._run_batch(queue, result.jobs, lane)
        if gate is not None and gate.waiting:
            gate.leave(ticket)


def main(batches: int = 40, freeze: bool = True) -> None:
    """Run the loop under callgrind and print Ir per job."""
    out_dir = tempfile.mkdtemp(prefix="worker-ir-")
    out = f"{out_dir}/cg.out"
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
         sys.executable, __file__, "--measured", str(batches), str(int(freeze))],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    with open(out, encoding="utf-8") as f:
        total = next(int(line.split()[1]) for line in f if line.startswith(("totals:", "summary:")))
    for path in glob.glob(f"{out_dir}/*"):
        os.remove(path)
    os.rmdir(out_dir)
    frozen = "start-up heap frozen" if freeze else "not frozen"
    print(f"worker {total / (batches * JOBS):8.0f} Ir per job (batch {JOBS}, {frozen})")


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--measured":
        _measured(int(sys.argv[2]), sys.argv[3] == "1")
    else:
        args = [a for a in sys.argv[1:] if a != "--no-freeze"]
        main(int(args[0]) if args else 40, "--no-freeze" not in sys.argv)

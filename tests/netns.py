"""A second test host: a network namespace joined to this one by a veth pair.

    with LinkedHost.create() as host:     # ip netns add + veth + a private /30
        host.host_ip, host.ns_ip        # e.g. 10.200.17.1 (this side), 10.200.17.2 (theirs)
        host.popen([...])               # a process inside the namespace (ip netns exec)
        host.partition(); host.heal()   # link down / up on this side

The addresses exist only on the two ends of the pair this helper creates, so
traffic to them never leaves the machine. Everything is removed on exit.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from typing import Any


class NamespaceUnavailable(RuntimeError):
    """Namespaces cannot be made here (not root, no iproute2, or the kernel refused)."""


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *(["netns", "exec", netns, "ip"] if netns else []), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode != 0:
        raise NamespaceUnavailable(f"{' '.join(cmd)}: {proc.stderr.strip()}")


def _free_subnet() -> int:
    """A third octet x such that 10.200.x.0/30 is not configured on this host."""
    shown = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=False)
    for _ in range(200):
        x = random.randrange(0, 256)
        if f"10.200.{x}." not in shown.stdout:
            return x
    raise NamespaceUnavailable("no free 10.200.x.0/30 subnet")


@dataclass
class LinkedHost:
    """One namespace and its veth link (``host_if`` here, ``ns_if`` there)."""

    netns: str
    host_if: str
    ns_if: str
    host_ip: str
    ns_ip: str

    @classmethod
    def create(cls) -> LinkedHost:
        """Make the namespace, the veth pair and the /30; bring both ends up.

        Raises:
            NamespaceUnavailable: not root, ``ip`` missing, or a step refused.
        """
        if os.geteuid() != 0:
            raise NamespaceUnavailable("network namespaces need root")
        if shutil.which("ip") is None:
            raise NamespaceUnavailable("iproute2 (`ip`) is not installed")
        tag = uuid.uuid4().hex[:6]
        x = _free_subnet()
        host = cls(f"of-{tag}", f"ofh{tag}", f"ofn{tag}", f"10.200.{x}.1", f"10.200.{x}.2")
        _ip("netns", "add", host.netns)
        try:
            _ip("link", "add", host.host_if, "type", "veth", "peer", "name", host.ns_if)
            _ip("link", "set", host.ns_if, "netns", host.netns)
            _ip("addr", "add", f"{host.host_ip}/30", "dev", host.host_if)
            _ip("link", "set", host.host_if, "up")
            _ip("addr", "add", f"{host.ns_ip}/30", "dev", host.ns_if, netns=host.netns)
            _ip("link", "set", host.ns_if, "up", netns=host.netns)
            _ip("link", "set", "lo", "up", netns=host.netns)
        except NamespaceUnavailable:
            host.remove()
            raise
        return host

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside the namespace (``ip netns exec``)."""
        return subprocess.Popen(["ip", "netns", "exec", self.netns, *argv], **kwargs)

    def partition(self) -> None:
        """Cut the link (this side down): packets to and from the namespace are lost."""
        _ip("link", "set", self.host_if, "down")

    def heal(self) -> None:
        """Bring the link back up."""
        _ip("link", "set", self.host_if, "up")

    def remove(self) -> None:
        """Delete the veth pair and the namespace (errors ignored: best effort)."""
        for cmd in (["link", "del", self.host_if], ["netns", "del", self.netns]):
            subprocess.run(["ip", *cmd], capture_output=True, timeout=30, check=False)

    def __enter__(self) -> LinkedHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

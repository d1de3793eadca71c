"""Load the Lua scripts beside this module and run them, pipelined, by EVALSHA.

A script file may contain ``-- @include <file>.lua`` lines; each is replaced by
that fragment's text at load time, so shared code is included, not copied.
Scripts are sent by EVALSHA; a NOSCRIPT reply (Redis restarted or SCRIPT FLUSH)
loads them again and re-runs only the commands that failed, never the others.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import redis
from redis.exceptions import NoScriptError

from .errors import QueueConnectionError

_INCLUDE = re.compile(r"^-- @include (\S+)\s*$", re.MULTILINE)


@cache
def script_source(name: str) -> str:
    """Full text of ``lua/<name>.lua`` with its ``@include`` lines expanded.

    Raises:
        FileNotFoundError: if the file or an included fragment does not exist.
    """
    folder = resources.files(__package__).joinpath("lua")

    def expand(match: re.Match[str]) -> str:
        return folder.joinpath(match.group(1)).read_text(encoding="utf-8")

    return _INCLUDE.sub(expand, folder.joinpath(f"{name}.lua").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Call:
    """One script invocation: script name, KEYS and ARGV."""

    script: str
    keys: Sequence[str]
    args: Sequence[Any]


class ScriptRunner:
    """Runs named scripts on one Redis client, many per round trip.

    Args:
        client: a redis-py client created with ``decode_responses=False``.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._sha = {}  # type: dict[str, str]

    def sha(self, name: str) -> str:
        """SHA1 of a script's expanded source (what EVALSHA takes)."""
        sha = self._sha.get(name)
        if sha is None:
            sha = hashlib.sha1(script_source(name).encode()).hexdigest()
            self._sha[name] = sha
        return sha

    def run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run one script and return its reply.

        Raises:
            QueueConnectionError: Redis unreachable or the connection dropped.
            redis.ResponseError: the script itself failed (a bug, not a condition).
        """
        # One script needs no pipeline: a plain EVALSHA saves redis-py's pipeline set-up,
        # a third of a single enqueue's client time.
        sha = self.sha(name)
        try:
            try:
                return self._client.evalsha(sha, len(keys), *keys, *args)
            except NoScriptError:
                self._load({name})
                return self._client.evalsha(sha, len(keys), *keys, *args)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise QueueConnectionError(f"Redis command failed: {exc}") from exc

    def run_many(
        self, calls: Sequence[Call], extra: Sequence[tuple[str, tuple[Any, ...]]] = ()
    ) -> list[Any]:
        """Run several scripts (and plain commands) in one pipelined round trip.

        Args:
            calls: the script calls, replied in order.
            extra: plain commands ``(name, args)`` appended after the scripts (read-only
                commands such as LLEN; they are not re-run on NOSCRIPT).

        Returns:
            One reply per call, then one per extra command.

        Raises:
            QueueConnectionError: Redis unreachable or the connection dropped.
            redis.ResponseError: a script failed for a reason other than NOSCRIPT.
        """
        try:
            pipe = self._client.pipeline(transaction=False)
            for call in calls:
                pipe.evalsha(self.sha(call.script), len(call.keys), *call.keys, *call.args)
            for command, cargs in extra:
                pipe.execute_command(command, *cargs)
            replies = pipe.execute(raise_on_error=False)
            missing = [
                i for i, r in enumerate(replies[: len(calls)]) if isinstance(r, NoScriptError)
            ]
            if missing:
                self._load({calls[i].script for i in missing})
                pipe = self._client.pipeline(transaction=False)
                for i in missing:
                    call = calls[i]
                    pipe.evalsha(self.sha(call.script), len(call.keys), *call.keys, *call.args)
                for i, reply in zip(missing, pipe.execute(raise_on_error=False), strict=True):
                    replies[i] = reply
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise QueueConnectionError(f"Redis command failed: {exc}") from exc
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    def _load(self, names: set[str]) -> None:
        for name in names:
            loaded = self._client.script_load(script_source(name))
            if loaded != self.sha(name) and loaded != self.sha(name).encode():
                raise RuntimeError(f"script {name}: SHA mismatch after SCRIPT LOAD")

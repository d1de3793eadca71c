"""The queue library owns its keys: nothing in ``orders`` or ``workflows`` names or touches one.

Every Redis key of a queue (``<prefix>:{<name>}:<kind>``, its idempotency keys
``<prefix>:{<name>}:idem:<key>``, the registry ``<prefix>:queues``) is built and
read only inside ``reliable_queue`` (ADR 0029). The application asks the
``Queue`` (``pending_jobs_for``, ``drop_untrusted_keys``, ``size_of``,
``lease_tokens``, ``evict_key_for_chaos``, ``DeadLetters.newest``,
``reliable_queue.namespace.delete_namespace``) instead.

The scan below reads the source (``ast``) of every module of both packages and
fails on:

- building a queue key name: ``<x>.keys.key(...)`` / ``.idempotency_key`` /
  ``.script_keys`` / ``.flow_keys`` / ``.base`` / ``.registry``, ``QueueKeys``, ``KEY_ORDER``, an
  import of ``reliable_queue.keys``, or a text that spells a hash tag (``:{``) or
  an idempotency key (``:idem:``);
- reaching past a queue to its Redis: ``<queue>.client``, ``<queue>.scripts``,
  ``<queue>.keys`` or a private attribute of a queue;
- a key-pattern walk (``scan``, ``scan_iter``, ``keys``, ``delete_namespace`` is the
  library's), which sweeps queue keys with everything else;
- a Redis command in a module that is not in :data:`APP_KEY_MODULES`, the list of
  modules that keep keys of the application's own (each with the keys it touches
  and why they are not a queue's). Server commands (``CONFIG GET`` of the eviction
  check, ``PING``, ``CLIENT LIST``) name no key and are not counted.

The checks are proven on planted snippets first, so a check that can no longer fail
is caught too; a second test holds the application's own key names outside the
queue's layout.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from orders.app.namespace import claim_key
from orders.worker.counters import counters_key
from orders.worker.faults import faults_key
from orders.worker.relay_loop import relay_lock_key
from reliable_queue.keys import KEY_ORDER, QueueKeys

REPO = Path(__file__).resolve().parents[2]
SCANNED = [REPO / "orders", REPO / "workflows"]

#: attributes of ``QueueKeys`` that build key names
KEY_BUILDERS = {"key", "idempotency_key", "script_keys", "flow_keys", "base", "registry"}
#: names that hold or build the queue's key layout
KEY_LAYOUT_NAMES = {"QueueKeys", "KEY_ORDER"}
#: attributes of a ``Queue`` that lead to its Redis keys or connection
QUEUE_INTERNALS = {"client", "scripts", "keys"}
#: redis-py methods that send a command naming a key (or a pattern of keys)
KEY_COMMANDS = {
    "append", "blpop", "brpop", "decr", "delete", "eval", "evalsha", "exists", "expire",
    "get", "getdel", "getset", "hdel", "hexists", "hget", "hgetall", "hincrby", "hkeys",
    "hlen", "hmget", "hset", "hsetnx", "hvals", "incr", "incrby", "llen", "lpop", "lpos",
    "lpush", "lrange", "lrem", "ltrim", "mget", "mset", "pexpire", "pipeline", "rpop",
    "rpush", "sadd", "set", "setnx", "smembers", "srem", "ttl", "type", "unlink", "watch",
    "zadd", "zcard", "zrange", "zrangebyscore", "zrem", "zscore",
}  # fmt: skip
#: commands that walk keys by pattern: they reach the queue's keys with the rest
PATTERN_COMMANDS = {"scan", "scan_iter", "keys"}
#: the receiver of a Redis command: a client, a pipeline, ``app.redis``
CLIENT_RECEIVER = re.compile(r"(^|\.|_)(redis|client|pipe|pipeline)$")
#: a text that spells a queue's hash tag (``:{stock}``, a format's ``:{{{}}}``) or an
#: idempotency key's infix
QUEUE_KEY_TEXT = re.compile(r":\{[^{}\s]+\}|:\{\{|:idem:")
#: the same in a piece of an f-string, where ``f"{p}:{{{n}}}:ready"`` leaves ``:{`` and
#: ``}:ready`` around the name
FSTRING_KEY_TEXT = re.compile(r":\{$|^\}:|:idem:")

APP_KEY_MODULES: dict[str, str] = {
    "orders/app/namespace.py": (
        "the namespace claim <prefix>:database (GET, SET NX, SET): the application's, "
        "outside every hash tag; deleting the namespace is the library's delete_namespace"
    ),
    "orders/worker/faults.py": (
        "injected handler faults <prefix>:inject, <prefix>:inject:crashed and "
        "<prefix>:inject:hung_in_tx (hashes): the application's fault switches"
    ),
    "orders/worker/counters.py": (
        "the application's counters <prefix>:counters (HINCRBY, HGETALL, DEL)"
    ),
    "orders/worker/relay_loop.py": (
        "the sweepers' turn lock <prefix>:relay-lock (SET NX PX): the application's"
    ),
    "orders/chaos/setup.py": (
        "a chaos run's reset of <prefix>:inject:crashed, and CONFIG GET/SET appendfsync "
        "(server settings, no key)"
    ),
}
"""Modules that may send Redis commands, each with the only keys it touches and why."""


def violations(source: str, path: str = "<snippet>") -> list[str]:
    """Every breach of the rule in one module's source, as ``path:line: what``."""
    tree = ast.parse(source)
    found: list[str] = []
    sends_commands = False
    in_fstrings = {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for part in node.values
        if isinstance(part, ast.Constant)
    }

    def flag(node: ast.AST, what: str) -> None:
        found.append(f"{path}:{getattr(node, 'lineno', 0)}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in (
            "reliable_queue.keys",
            "reliable_queue.key_types",
        ):
            flag(node, f"imports the key layout from {node.module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("reliable_queue.keys", "reliable_queue.key_types"):
                    flag(node, f"imports the key layout {alias.name}")
        elif isinstance(node, ast.Name) and node.id in KEY_LAYOUT_NAMES:
            flag(node, f"uses {node.id}")
        elif isinstance(node, ast.Attribute):
            base = ast.unparse(node.value)
            if node.attr in KEY_LAYOUT_NAMES:
                flag(node, f"uses {node.attr}")
            elif node.attr in KEY_BUILDERS and base.endswith("keys"):
                flag(node, f"builds a queue key name: {base}.{node.attr}")
            elif _names_a_queue(node.value) and (
                node.attr in QUEUE_INTERNALS or node.attr.startswith("_")
            ):
                flag(node, f"reaches into a queue: {base}.{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            pattern = FSTRING_KEY_TEXT if id(node) in in_fstrings else QUEUE_KEY_TEXT
            if pattern.search(node.value) and not _is_docstring(tree, node):
                flag(node, f"spells a queue key: {node.value!r}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = ast.unparse(node.func.value)
            if node.func.attr in PATTERN_COMMANDS and CLIENT_RECEIVER.search(receiver):
                flag(node, f"walks keys by pattern: {receiver}.{node.func.attr}")
            elif node.func.attr in KEY_COMMANDS and CLIENT_RECEIVER.search(receiver):
                sends_commands = True
                if path not in APP_KEY_MODULES:
                    flag(node, f"sends a Redis command: {receiver}.{node.func.attr}")
    if path in APP_KEY_MODULES and not sends_commands:
        found.append(f"{path}: listed in APP_KEY_MODULES but sends no Redis command")
    return found


def _names_a_queue(node: ast.expr) -> bool:
    """Whether an expression names a queue object: its last name (past any subscript or
    call) says ``queue`` (``queue``, ``self.queues[0]``, ``self.queue_for(name)``) or is ``q``."""
    while isinstance(node, (ast.Subscript, ast.Call)):
        node = node.value if isinstance(node, ast.Subscript) else node.func
    if isinstance(node, ast.Attribute):
        name = node.attr
    elif isinstance(node, ast.Name):
        name = node.id
    else:
        return False
    return "queue" in name.lower() or name == "q"


def _is_docstring(tree: ast.Module, node: ast.Constant) -> bool:
    for owner in ast.walk(tree):
        if isinstance(owner, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = owner.body
            if body and isinstance(body[0], ast.Expr) and body[0].value is node:
                return True
    return False


def scanned_modules() -> list[tuple[str, str]]:
    """``(path relative to the repo, source)`` of every module of ``orders`` and ``workflows``.

    A package's ``tests/`` folder is left out, as ``tests/`` is: tests may plant keys.
    """
    out = []
    for root in SCANNED:
        for file in sorted(root.rglob("*.py")):
            if "tests" in file.relative_to(root).parts[:-1]:
                continue
            out.append((file.relative_to(REPO).as_posix(), file.read_text(encoding="utf-8")))
    return out


# --- the checks catch what they are for (planted snippets) ------------------------------------

PLANTED_BREACHES = {
    "key builder": "def f(queue):\n    return queue.keys.key('ready')\n",
    "idempotency key name": "def f(q, k):\n    return q.keys.idempotency_key(k)\n",
    "key layout import": "from reliable_queue.keys import QueueKeys\n",
    "key layout module": "import reliable_queue.keys\n",
    "queue client": "def f(queue):\n    return queue.client.get('x')\n",
    "queue of a list": "def f(self):\n    return self.queues[0].client\n",
    "queue scripts": "def f(queue):\n    queue.scripts.run('ack', [], [])\n",
    "queue private": "def f(queue):\n    return queue._keys\n",
    "hash tag text": "def f(p, n):\n    return f'{p}:{{{n}}}:ready'\n",
    "idem text": "KEY = 'orderflow:x:idem:1:stock'\n",
    "hash tag literal": "KEY = 'orderflow:{stock}:ready'\n",
    "hash tag format": "def f(p, n):\n    return '{}:{{{}}}:ready'.format(p, n)\n",
    "pattern walk": "def f(client, p):\n    return list(client.scan_iter(match=p + ':*'))\n",
    "command in an unlisted module": "def f(app):\n    app.redis.hlen('x')\n",
    "pipeline in an unlisted module": "def f(client):\n    client.pipeline()\n",
}

CLEAN = (
    '"""A docstring may say <prefix>:{<name>}:idem:<key>."""\n'
    "def f(app, queue, d, request):\n"
    "    queue.drop_untrusted_keys(['1:stock'])\n"
    "    n = queue.size_of('ready')\n"
    "    tokens = queue.lease_tokens()\n"
    "    host = request.client.host\n"  # a web request's client, not a queue's
    "    key = f'{app.prefix}:counters'\n"  # an application key: no hash tag
    "    line = 'order {}: {}'.format(1, 2)\n"  # a format's fields are no hash tag
    "    return d.get('x'), d.keys(), n, tokens, host, key\n"
)


@pytest.mark.parametrize("name", sorted(PLANTED_BREACHES))
def test_the_scan_catches_a_planted_breach(name):
    assert violations(PLANTED_BREACHES[name]), f"{name} went unnoticed"


def test_the_scan_passes_code_that_asks_the_queue():
    assert violations(CLEAN) == []


def test_a_listed_module_may_send_commands_but_never_walk_patterns():
    listed = "orders/worker/counters.py"
    assert violations("def f(client):\n    client.hgetall('a:counters')\n", listed) == []
    assert violations("def f(client):\n    client.scan_iter(match='a:*')\n", listed)
    assert violations("X = 1\n", listed), "a stale APP_KEY_MODULES entry went unnoticed"


# --- the rule holds in the source -------------------------------------------------------------


def test_orders_and_workflows_leave_the_queue_keys_to_the_queue():
    modules = scanned_modules()
    assert len(modules) > 100, "the scan found too few modules: wrong root?"
    found = [v for path, source in modules for v in violations(source, path)]
    assert found == [], "\n".join(found)


def test_every_listed_module_exists():
    for path in APP_KEY_MODULES:
        assert (REPO / path).is_file(), path


def test_the_application_keys_lie_outside_every_queue_layout():
    """An application key can never be mistaken for (or collide with) a queue's."""
    prefix = "orderflow"
    app_keys = [
        claim_key(prefix),
        counters_key(prefix),
        faults_key(prefix),
        f"{faults_key(prefix)}:crashed",
        f"{faults_key(prefix)}:hung_in_tx",
        relay_lock_key(prefix),
    ]
    registry = QueueKeys(prefix, "any").registry
    for key in app_keys:
        assert key.startswith(f"{prefix}:"), key  # rebinding the namespace deletes it too
        assert "{" not in key and "}" not in key, key  # no queue's hash tag
        assert key != registry, key
    # and a queue key always carries its hash tag
    keys = QueueKeys(prefix, "stock")
    assert all(k.startswith(f"{prefix}:{{stock}}:") for k in keys.script_keys())
    assert keys.idempotency_key("1:stock").startswith(f"{prefix}:{{stock}}:idem:")
    assert len(keys.script_keys()) == len(KEY_ORDER)

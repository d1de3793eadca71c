"""Static checks of the Lua scripts: headers, and every key reached through KEYS.

A script that builds a key name itself would touch a slot outside the queue's hash
tag on Redis Cluster; these checks read the sources, no Redis needed.
"""

import re
from importlib import resources

import pytest

from reliable_queue.scripts import script_source

LUA = resources.files("reliable_queue").joinpath("lua")
SCRIPTS = sorted(
    p.name.removesuffix(".lua")
    for p in LUA.iterdir()
    if p.name.endswith(".lua") and not p.name.startswith("_")
)
CALL = re.compile(r"redis\.call\(\s*'(\w+)'\s*(?:,\s*([^,)]+))?")
CHUNKED = re.compile(r"chunked\(\s*'(\w+)'\s*,\s*([^,)]+)")
KEYLESS = {"TIME"}


def test_there_is_one_script_per_state_change():
    assert set(SCRIPTS) >= {
        "ack", "dead", "enqueue", "extend", "fetch", "nack", "purge", "redrive", "release",
    }  # fmt: skip


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_header_documents_keys_args_returns_and_changes(name):
    head = LUA.joinpath(f"{name}.lua").read_text(encoding="utf-8").split("-- @include")[0]

    for word in ("KEYS", "ARGV", "Returns", "Changes"):
        assert word in head, f"{name}.lua header lacks {word}"


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_redis_call_names_its_key_through_keys(name):
    source = script_source(name)

    for command, first_arg in CALL.findall(source):
        if command in KEYLESS:
            continue
        key = first_arg.strip()
        assert key.startswith(("K_", "KEYS[")), f"{name}.lua: {command} {key}"
    for command, key in CHUNKED.findall(source):
        assert key.strip().startswith("K_"), f"{name}.lua: chunked {command} {key}"

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
# check() / check_string() in _common.lua run TYPE over the K_ keys (or KEYS[i]) the
# script hands them; the loop variable is not a key name built in Lua.
VALIDATING = {"TYPE"}


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
        if command in KEYLESS or command in VALIDATING:
            continue
        key = first_arg.strip()
        assert key.startswith(("K_", "KEYS[")), f"{name}.lua: {command} {key}"
    for command, key in CHUNKED.findall(source):
        assert key.strip().startswith("K_"), f"{name}.lua: chunked {command} {key}"


def test_the_lua_limits_agree_with_the_python_limits():
    from reliable_queue import limits

    common = script_source("_common")
    for name in ("MAX_BATCH", "TRIM_STEP", "MAX_ID_BYTES"):
        match = re.search(rf"^local {name} = (\d+)", common, re.MULTILINE)
        assert match, name
        python_name = "SCRIPT_BATCH" if name == "MAX_BATCH" else name
        assert int(match.group(1)) == getattr(limits, python_name), name


def test_the_presence_scripts_limits_agree_with_the_python_limits():
    from reliable_queue import limits

    source = script_source("presence")
    for name in ("MAX_ID_BYTES", "MAX_WORKER_STATE_BYTES", "PRESENCE_TRIM"):
        match = re.search(rf"^local {name} = (\d+)", source, re.MULTILINE)
        assert match, name
        assert int(match.group(1)) == getattr(limits, name), name


@pytest.mark.parametrize("name", SCRIPTS)
def test_no_script_unpacks_a_whole_list_at_once(name):
    """unpack of more than ~8000 values fails mid-script; every unpack is a slice or a
    list bounded by a constant (the wake tokens, the counters checked)."""
    source = script_source(name)
    for match in re.finditer(r"unpack\(([^)]*)\)", source):
        args = match.group(1)
        assert "," in args or args.strip() in {"t", "counters"}, f"{name}.lua: unpack({args})"


def test_the_queue_clock_of_the_views_uses_the_scripts_numbers():
    from reliable_queue import clock

    common = script_source("_common")
    for lua, value in (
        ("CLOCK_TOLERANCE_MS", clock.TOLERANCE_MS),
        ("CLOCK_SLEW", clock.SLEW),
        ("CLOCK_MAX_MS", clock.MAX_MS),
    ):
        match = re.search(rf"^local {lua} = (\d+)", common, re.MULTILINE)
        assert match and int(match.group(1)) == value, lua
    for name in (clock.LAST_FIELD, clock.OFFSET_FIELD):
        assert f"'{name}'" in common, name


def test_the_fencing_floor_bound_agrees_with_the_script():
    from reliable_queue.limits import MAX_FENCING_FLOOR

    source = script_source("raise_fencing_floor")
    match = re.search(r"^local FLOOR_MAX = (\d+)", source, re.MULTILINE)
    assert match and int(match.group(1)) == MAX_FENCING_FLOOR
    # the sequence may grow past any floor and stay below 2^53, exact in a Lua number
    fence_max = re.search(r"^local FENCE_MAX = (\d+) - MAX_BATCH", script_source("_common"), re.M)
    assert fence_max and int(fence_max.group(1)) == 2**53 - 1 > MAX_FENCING_FLOOR


def test_the_flow_control_numbers_agree_with_the_python_ones():
    from reliable_queue import errors, limits

    common, throttle = script_source("_common"), script_source("throttle")
    assert re.search(r"^ *local BAND = (\d+)", common, re.M).group(1) == str(2**48)
    band = re.search(r"^ *local DEFAULT_BAND = (\d+)", common, re.M).group(1)
    assert int(band) == limits.DEFAULT_PRIORITY
    delay_ms = re.search(r"local MAX_DELAY_MS = (\d+)", throttle).group(1)
    assert int(delay_ms) == int(limits.MAX_DELAY_SECONDS * 1000)
    assert errors.MAX_THROTTLE_DELAY_SECONDS == limits.MAX_DELAY_SECONDS
    assert f"budget <= {limits.MAX_THROTTLES}" in throttle
    # the scripts take a cap of at most 9 digits: every cap Python allows
    assert "#k > 9" in script_source("pause") and limits.MAX_KEY_CAP < 10**9

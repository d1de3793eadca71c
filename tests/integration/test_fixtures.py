"""The shared fixtures give each test its own Redis key space and its own database."""

import redis
import sqlalchemy as sa
from orderflow_fixtures import delete_keys_matching


def test_redis_client_talks_to_the_session_server(redis_client, redis_url):
    assert redis_client.ping()
    with redis.Redis.from_url(redis_url) as client:
        assert client.ping()


def test_key_prefix_is_unique_per_test_and_its_keys_are_deleted_after(redis_url, key_prefix):
    other = "t-" + "0" * 8
    assert key_prefix.startswith("t-") and len(key_prefix) == 10 and key_prefix != other
    with redis.Redis.from_url(redis_url) as client:
        client.set(f"{key_prefix}:a", 1)
        client.set(f"rq:{{{key_prefix}-jobs}}:ready", 1)
        assert delete_keys_matching(client, f"*{key_prefix}*") == 2
        assert client.exists(f"{key_prefix}:a") == 0


def test_database_url_is_a_fresh_empty_database_that_accepts_writes(database_url):
    assert ":memory:" not in database_url
    engine = sa.create_engine(database_url)
    try:
        assert sa.inspect(engine).get_table_names() == []
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE t (id INTEGER PRIMARY KEY)"))
            conn.execute(sa.text("INSERT INTO t (id) VALUES (1)"))
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM t")).scalar_one() == 1
    finally:
        engine.dispose()


def test_data_dir_is_an_empty_directory(data_dir, cli_env):
    assert data_dir.is_dir() and list(data_dir.iterdir()) == []
    assert cli_env["ORDERS_DATA_DIR"] == str(data_dir)


def test_embedded_redis_fixture_survives_a_kill(embedded_redis):
    with redis.Redis.from_url(embedded_redis.url) as client:
        client.set("k", "v")
    embedded_redis.kill()
    with redis.Redis.from_url(embedded_redis.ensure_running()) as client:
        assert client.get("k") == b"v"

"""Credentials in URLs are never printed: mask_url and mask_urls_in."""

from __future__ import annotations

import pytest

from orders.observability.urls import mask_url, mask_urls_in


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0"),
        ("rediss://app:s3cret@cache.example:6380/1", "rediss://app:***@cache.example:6380/1"),
        ("postgresql://orders:p%40ss@db/orders", "postgresql://orders:***@db/orders"),
        (
            "postgresql+psycopg://u:pw@[::1]:5432/db?sslmode=require",
            "postgresql+psycopg://u:***@[::1]:5432/db?sslmode=require",
        ),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("postgresql://postgres@127.0.0.1:5432/test", "postgresql://postgres@127.0.0.1:5432/test"),
        ("unix:///tmp/redis.sock", "unix:///tmp/redis.sock"),
        ("sqlite:////data/orders.db", "sqlite:////data/orders.db"),
    ],
)
def test_mask_url_hides_only_the_password(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_mask_url_keeps_none() -> None:
    assert mask_url(None) is None


def test_passwords_inside_free_text_are_masked() -> None:
    text = (
        "connect to redis://:hunter2@10.0.0.5:6379/0 failed; "
        "fell back from postgresql://app:topsecret@db:5432/orders"
    )
    masked = mask_urls_in(text)
    assert "hunter2" not in masked and "topsecret" not in masked
    assert "redis://:***@10.0.0.5:6379/0" in masked
    assert "postgresql://app:***@db:5432/orders" in masked
    assert mask_urls_in("no url here") == "no url here"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # redis-py and SQLAlchemy both read a password from the query string
        ("redis://cache:6379/0?password=hunter2", "redis://cache:6379/0?password=***"),
        (
            "redis://cache:6379/0?db=1&password=hunter2&ssl=false",
            "redis://cache:6379/0?db=1&password=***&ssl=false",
        ),
        ("postgresql://u@db/orders?password=hunter2", "postgresql://u@db/orders?password=***"),
        # an unencoded '/', '?', '#' or '@' in the password
        ("redis://:hun/ter2@cache:6379/0", "redis://:***@cache:6379/0"),
        ("redis://app:a?b#c@cache:6379/0", "redis://app:***@cache:6379/0"),
        ("postgresql://app:p@ss@db/orders", "postgresql://app:***@db/orders"),
        # a malformed port must not raise
        ("redis://:hunter2@cache:notaport/0", "redis://:***@cache:notaport/0"),
        ("redis://:hunter2@cache:99999999/0", "redis://:***@cache:99999999/0"),
        ("redis://:hunter2@[::1/0", "redis://:***@[::1/0"),
    ],
)
def test_mask_url_hides_every_form_of_password(url: str, shown: str) -> None:
    assert mask_url(url) == shown
    assert "hunter2" not in (mask_urls_in(f"failed: {url} (retrying)"))


def test_unencoded_slash_in_a_password_is_masked_inside_free_text() -> None:
    text = "Error connecting to rediss://app:hun/ter2@cache:6380/0: refused"
    masked = mask_urls_in(text)
    assert "hun" not in masked.replace("rediss", "") and "ter2" not in masked
    assert "rediss://app:***@cache:6380/0:" in masked


def test_password_parameters_in_free_text_are_masked() -> None:
    masked = mask_urls_in("connect(host=db password=hunter2 sslpassword=x2)")
    assert "hunter2" not in masked and "x2" not in masked
    assert mask_urls_in("the reason=timeout") == "the reason=timeout"


def test_a_url_whose_port_is_not_a_number_is_masked_not_raised() -> None:
    assert mask_url("redis://:hunter2@host:abc/0") == "redis://:***@host:abc/0"

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

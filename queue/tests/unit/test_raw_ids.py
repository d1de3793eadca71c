"""Stored job ids and their text forms name each other, whatever the bytes.

An id that is not UTF-8 is shown as ``hex:<its bytes>`` and taken back by that text;
a UTF-8 id that would read as such a form is shown in hex too, so no text names two
ids (``reliable_queue.raw_ids``).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable_queue import InvalidTextError
from reliable_queue.raw_ids import id_member, id_text, leasable, unreadable

# ids that look like hex forms, of ids that look like hex forms, ...
HEXY = st.recursive(
    st.binary(max_size=12), lambda inner: inner.map(lambda b: b"hex:" + b.hex().encode())
)


def stored(member: bytes | str) -> bytes:
    return member if isinstance(member, bytes) else member.encode("utf-8")


@given(st.one_of(st.binary(max_size=40), HEXY))
def test_the_text_of_every_stored_id_names_that_id_again(raw: bytes) -> None:
    assert stored(id_member(id_text(raw))) == raw


@given(st.one_of(st.text(max_size=30), HEXY.map(lambda b: b.decode("latin-1"))))
def test_every_text_that_encodes_is_the_text_of_the_id_it_names(text: str) -> None:
    try:
        member = id_member(text)
    except InvalidTextError:  # a lone surrogate
        return
    assert id_text(stored(member)) == text


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"1a2b3c", "1a2b3c"),
        (b"\xff\x01", "hex:ff01"),
        (b"hex:ff", "hex:6865783a6666"),  # a UTF-8 id that reads as a hex form
        (b"hex:6162", "hex:6162"),  # names b"ab", which is UTF-8: it names itself
        (b"hex:FF", "hex:FF"),  # upper case is no hex form
    ],
)
def test_examples_of_the_two_forms(raw: bytes, text: str) -> None:
    assert id_text(raw) == text
    assert stored(id_member(text)) == raw


def test_only_a_short_utf8_id_can_be_leased() -> None:
    assert leasable("1a2b3c") and not leasable("hex:ff01") and not leasable("x" * 201)
    assert unreadable("hex:ff01") and not unreadable("hex:6162")
    with pytest.raises(InvalidTextError):
        id_member("bad\udcff")

"""Built-in serdes: every value a serde accepts comes back equal, and bad input is a SerdeError."""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from millstream.serde.base import Serde, SerdeError
from millstream.serde.builtin import BytesSerde, JsonSerde, LongSerde, MsgpackSerde, StringSerde

text = st.text(st.characters(codec="utf-8"))
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    text,
)
json_values = st.recursive(
    json_scalars, lambda children: st.lists(children, max_size=5) | st.dictionaries(text, children, max_size=5)
)
msgpack_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    text,
    st.binary(),
)
msgpack_values = st.recursive(
    msgpack_scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.one_of(text, st.integers(min_value=-(2**63), max_value=2**63 - 1)), children, max_size=5)
    ),
)


@given(text)
def test_string_round_trips(value: str) -> None:
    assert StringSerde().from_bytes(StringSerde().to_bytes(value)) == value


@given(st.binary())
def test_bytes_round_trips_unchanged(value: bytes) -> None:
    serde = BytesSerde()
    assert serde.to_bytes(value) == value
    assert serde.from_bytes(value) is value


@given(json_values)
def test_json_round_trips(value: Any) -> None:
    assert JsonSerde().from_bytes(JsonSerde().to_bytes(value)) == value


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_long_round_trips(value: int) -> None:
    assert LongSerde().from_bytes(LongSerde().to_bytes(value)) == value


@given(msgpack_values)
def test_msgpack_round_trips_keeping_bytes_and_str_apart(value: Any) -> None:
    assert MsgpackSerde().from_bytes(MsgpackSerde().to_bytes(value)) == value


def test_string_serde_encodes_utf8() -> None:
    assert StringSerde().to_bytes("é") == b"\xc3\xa9"


def test_string_serde_honours_another_encoding() -> None:
    serde = StringSerde("latin-1")
    assert serde.to_bytes("é") == b"\xe9"
    assert serde.from_bytes(b"\xe9") == "é"


def test_bytes_serde_accepts_bytearray_and_memoryview() -> None:
    assert BytesSerde().to_bytes(bytearray(b"ab")) == b"ab"
    assert BytesSerde().to_bytes(memoryview(b"cd")) == b"cd"


def test_long_serde_is_8_bytes_big_endian_as_samza() -> None:
    assert LongSerde().to_bytes(1) == b"\x00\x00\x00\x00\x00\x00\x00\x01"
    assert LongSerde().to_bytes(-1) == b"\xff" * 8
    assert LongSerde().from_bytes(struct.pack(">q", 2**40)) == 2**40


def test_json_serde_writes_non_string_keys_as_strings() -> None:
    assert JsonSerde().from_bytes(JsonSerde().to_bytes({1: "a"})) == {"1": "a"}


def test_msgpack_keeps_bytes_and_str_distinct() -> None:
    assert MsgpackSerde().from_bytes(MsgpackSerde().to_bytes([b"x", "x"])) == [b"x", "x"]


@pytest.mark.parametrize(
    ("serde", "value", "fragment"),
    [
        (StringSerde(), b"bytes", "string serde expects str"),
        (StringSerde(), "\ud800", "string serde"),
        (StringSerde("ascii"), "é", "string serde"),
        (BytesSerde(), "text", "bytes serde expects bytes"),
        (JsonSerde(), object(), "json serde"),
        (JsonSerde(), 2**64, "json serde"),
        (JsonSerde(), "\ud800", "json serde"),
        (LongSerde(), "1", "long serde expects int"),
        (LongSerde(), True, "long serde expects int"),
        (LongSerde(), 1.0, "long serde expects int"),
        (LongSerde(), 2**63, "does not fit in 64 bits"),
        (MsgpackSerde(), object(), "msgpack serde"),
        (MsgpackSerde(), 2**64, "msgpack serde"),
        (MsgpackSerde(), "\ud800", "msgpack serde"),
    ],
)
def test_values_a_serde_cannot_write_raise_serde_error(serde: Serde, value: Any, fragment: str) -> None:
    with pytest.raises(SerdeError, match=fragment):
        serde.to_bytes(value)


@pytest.mark.parametrize(
    ("serde", "data", "fragment"),
    [
        (StringSerde(), b"\xff\xfe", "not valid utf-8"),
        (JsonSerde(), b"{not json", "invalid JSON"),
        (JsonSerde(), b"", "invalid JSON"),
        (JsonSerde(), b"\xff", "invalid JSON"),
        (LongSerde(), b"\x00" * 7, "expects 8 bytes, got 7"),
        (LongSerde(), b"\x00" * 9, "expects 8 bytes, got 9"),
        (MsgpackSerde(), b"", "invalid data"),
        (MsgpackSerde(), b"\xc1", "invalid data"),
        (MsgpackSerde(), b"\x01\x02", "invalid data"),
        (MsgpackSerde(), b"\xa2\xff\xfe", "invalid data"),
        (MsgpackSerde(), b"\x81\x91\x01\x02", "invalid data"),
    ],
)
def test_malformed_bytes_raise_serde_error(serde: Serde, data: bytes, fragment: str) -> None:
    with pytest.raises(SerdeError, match=fragment):
        serde.from_bytes(data)


@given(st.binary())
def test_arbitrary_bytes_either_decode_or_raise_serde_error(data: bytes) -> None:
    for serde in (StringSerde(), JsonSerde(), LongSerde(), MsgpackSerde()):
        with contextlib.suppress(SerdeError):
            serde.from_bytes(data)

"""Plain Protobuf: messages (or dicts of their fields) round-trip as the message class's own encoding, and
what is not such a message is a SerdeError naming the serde and the message type."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from millstream.config.settings import Settings
from millstream.errors import ConfigError
from millstream.model import SystemStream
from millstream.serde.base import SerdeError
from millstream.serde.protobuf import ProtobufSerde
from millstream.serde.registry import SerdeRegistry
from tests.serde.messages import PageView

STREAM = SystemStream("log", "views")


def protobuf_serde(message_class: str = "tests.serde.messages:PageView") -> ProtobufSerde:
    config = Settings(
        {
            "serializers.registry.pv.class": "protobuf",
            "serializers.registry.pv.message.class": message_class,
            "systems.log.streams.views.samza.msg.serde": "pv",
        }
    )
    serde = SerdeRegistry.from_config(config).msg_serde(STREAM)
    assert isinstance(serde, ProtobufSerde)
    return serde


def test_a_message_round_trips_as_its_own_encoding() -> None:
    serde = protobuf_serde()
    view = PageView(user="ada", page="/home", ts=7)
    data = serde.to_bytes(view)
    assert data == view.SerializeToString()
    assert serde.from_bytes(data) == view


def test_a_dict_of_the_message_fields_is_written_as_the_message() -> None:
    serde = protobuf_serde()
    assert serde.from_bytes(serde.to_bytes({"user": "ada", "ts": 7})) == PageView(user="ada", ts=7)


@pytest.mark.parametrize("value", [{"usr": "ada"}, "ada", 7], ids=["unknown-field", "str", "int"])
def test_a_value_that_is_not_the_message_is_a_serde_error(value: object) -> None:
    with pytest.raises(SerdeError, match="protobuf serde 'pv'"):
        protobuf_serde().to_bytes(value)


def test_bytes_that_are_not_the_message_are_a_serde_error_naming_the_type() -> None:
    with pytest.raises(SerdeError, match=r"not a millstream\.tests\.PageView"):
        protobuf_serde().from_bytes(b"\x0a\xff\xff")


@pytest.mark.parametrize(
    ("message_class", "fragment"),
    [("", "set serializers.registry.pv.message.class"), ("tests.serde.messages:_POOL", "not a generated protobuf")],
)
def test_the_message_class_must_name_a_generated_message(message_class: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        protobuf_serde(message_class)


@given(st.text(), st.text(), st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_every_message_round_trips(user: str, page: str, ts: int) -> None:
    serde = ProtobufSerde(PageView, "pv")
    view = PageView(user=user, page=page, ts=ts)
    assert serde.from_bytes(serde.to_bytes(view)) == view

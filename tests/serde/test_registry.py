"""The serde registry: built-ins by name, serializers.registry.<name>.class (aliases, Samza factory
class names, module:Class), and each stream's serdes with stream-level settings beating system-level."""

from __future__ import annotations

from typing import Any

import pytest

from millstream.config.settings import Settings
from millstream.errors import ConfigError
from millstream.model import SystemStream
from millstream.serde.builtin import BytesSerde, JsonSerde, LongSerde, MsgpackSerde, StringSerde
from millstream.serde.registry import SerdeRegistry

STREAM = SystemStream("log", "in")


class UpperSerde:
    def to_bytes(self, obj: Any) -> bytes:
        return str(obj).upper().encode()

    def from_bytes(self, data: bytes) -> Any:
        return data.decode().lower()


class NotASerde:
    pass


class BrokenSerde:
    def __init__(self) -> None:
        raise RuntimeError("no luck")


def registry(values: dict[str, str]) -> SerdeRegistry:
    return SerdeRegistry.from_config(Settings(values))


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("string", StringSerde),
        ("bytes", BytesSerde),
        ("json", JsonSerde),
        ("long", LongSerde),
        ("msgpack", MsgpackSerde),
    ],
)
def test_built_in_serdes_need_no_registration(name: str, kind: type) -> None:
    assert isinstance(registry({}).get(name), kind)


@pytest.mark.parametrize(
    ("class_name", "kind"),
    [
        ("org.apache.samza.serializers.StringSerdeFactory", StringSerde),
        ("org.apache.samza.serializers.ByteSerdeFactory", BytesSerde),
        ("org.apache.samza.serializers.JsonSerdeV2Factory", JsonSerde),
        ("org.apache.samza.serializers.JsonSerdeFactory", JsonSerde),
        ("org.apache.samza.serializers.LongSerdeFactory", LongSerde),
        ("json", JsonSerde),
        ("millstream.serde.builtin:MsgpackSerde", MsgpackSerde),
        ("millstream.serde.builtin.LongSerde", LongSerde),
    ],
)
def test_registered_class_names_include_samza_factories_and_aliases(class_name: str, kind: type) -> None:
    assert isinstance(registry({"serializers.registry.mine.class": class_name}).get("mine"), kind)


def test_module_colon_class_registers_a_custom_serde() -> None:
    serdes = registry({"serializers.registry.upper.class": f"{__name__}:UpperSerde"})
    serde = serdes.get("upper")
    assert isinstance(serde, UpperSerde)
    assert serde.from_bytes(serde.to_bytes("abc")) == "abc"


def test_registration_may_replace_a_built_in_name() -> None:
    assert isinstance(registry({"serializers.registry.json.class": f"{__name__}:UpperSerde"}).get("json"), UpperSerde)


def test_unknown_serde_name_lists_the_registered_ones_and_who_named_it() -> None:
    with pytest.raises(ConfigError) as raised:
        registry({}).get("nosuch", "systems.log.samza.msg.serde")
    message = str(raised.value)
    assert "unknown serde 'nosuch'" in message
    assert "systems.log.samza.msg.serde" in message
    assert "json" in message and "serializers.registry.<name>.class" in message


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("serializers.registry.x.klass", "string", "expected serializers.registry.<name>.class"),
        ("serializers.registry.x", "string", "expected serializers.registry.<name>.class"),
        ("serializers.registry.x.class", "nosuch", "not a known name"),
        ("serializers.registry.x.class", "no.such.module:Serde", "cannot import"),
        ("serializers.registry.x.class", f"{__name__}:Missing", "has no 'Missing'"),
        ("serializers.registry.x.class", f"{__name__}:NotASerde", "no to_bytes/from_bytes"),
        ("serializers.registry.x.class", f"{__name__}:BrokenSerde", "cannot create serde"),
    ],
)
def test_bad_registrations_name_the_key(key: str, value: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as raised:
        registry({key: value})
    assert f"'{key}'" in str(raised.value)
    assert fragment in str(raised.value)


def test_stream_without_serdes_passes_bytes_through() -> None:
    serdes = registry({})
    assert serdes.key_serde(STREAM) is None
    assert serdes.msg_serde(STREAM) is None


def test_system_level_serdes_apply_to_every_stream_of_the_system() -> None:
    serdes = registry({"systems.log.samza.key.serde": "string", "systems.log.samza.msg.serde": "json"})
    assert isinstance(serdes.key_serde(STREAM), StringSerde)
    assert isinstance(serdes.msg_serde(SystemStream("log", "other")), JsonSerde)
    assert serdes.msg_serde(SystemStream("kafka", "in")) is None


def test_stream_level_serde_beats_system_level() -> None:
    serdes = registry(
        {
            "systems.log.samza.msg.serde": "json",
            "systems.log.streams.in.samza.msg.serde": "msgpack",
            "systems.log.samza.key.serde": "string",
        }
    )
    assert isinstance(serdes.msg_serde(STREAM), MsgpackSerde)
    assert isinstance(serdes.key_serde(STREAM), StringSerde)
    assert isinstance(serdes.msg_serde(SystemStream("log", "other")), JsonSerde)


def test_stream_level_custom_serde_is_used_for_that_stream() -> None:
    serdes = registry(
        {
            "serializers.registry.upper.class": f"{__name__}:UpperSerde",
            "systems.log.streams.in.samza.key.serde": "upper",
        }
    )
    assert isinstance(serdes.key_serde(STREAM), UpperSerde)


def test_unknown_stream_level_serde_names_the_stream_key() -> None:
    serdes = registry({"systems.log.samza.msg.serde": "json", "systems.log.streams.in.samza.msg.serde": "nosuch"})
    with pytest.raises(ConfigError, match=r"'nosuch'.*systems\.log\.streams\.in\.samza\.msg\.serde"):
        serdes.msg_serde(STREAM)


def test_unknown_system_level_serde_names_the_system_key() -> None:
    with pytest.raises(ConfigError, match=r"'nosuch'.*systems\.log\.samza\.key\.serde"):
        registry({"systems.log.samza.key.serde": "nosuch"}).key_serde(STREAM)


class TopicSerde:
    """Writes the topic it was bound to, as a registry serde names its subject after it."""

    def __init__(self, topic: str = "") -> None:
        self.topic = topic

    def for_stream(self, stream: SystemStream, kind: str) -> TopicSerde:
        return TopicSerde(f"{stream.stream}-{kind}")

    def to_bytes(self, obj: Any) -> bytes:
        return self.topic.encode()

    def from_bytes(self, data: bytes) -> Any:
        return data


def test_a_stream_bound_serde_is_bound_to_each_stream_it_serves() -> None:
    serdes = registry(
        {
            "serializers.registry.t.class": f"{__name__}:TopicSerde",
            "systems.log.samza.msg.serde": "t",
            "systems.log.streams.in.samza.key.serde": "t",
        }
    )
    other, key = serdes.msg_serde(SystemStream("log", "other")), serdes.key_serde(STREAM)
    assert other is not None and other.to_bytes(1) == b"other-msg"
    assert key is not None and key.to_bytes(1) == b"in-key"
    assert serdes.for_stream("t", SystemStream("log", "mid"), "msg").to_bytes(1) == b"mid-msg"

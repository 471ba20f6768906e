"""Serdes by name, and the key/message serde of each stream as Samza's keys configure them.

``serializers.registry.<name>.class`` names a serde class (a built-in name, a Samza factory class
name, or ``module:Class``). A class with a ``from_config(name, config)`` classmethod (``avro``,
``protobuf``) reads its other ``serializers.registry.<name>.*`` settings itself; other classes take none.
A serde with a ``for_stream(stream, kind)`` method (the schema-registry ones, whose subject depends on the
topic) is bound to each stream it serves. A stream's serdes come from
``systems.<s>.streams.<stream>.samza.{key,msg}.serde``, else ``systems.<s>.samza.{key,msg}.serde``,
else bytes pass through untouched.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from millstream.config.settings import Settings
from millstream.config.views import StreamSamzaConfig, SystemSamzaConfig, accepted_keys
from millstream.errors import ConfigError
from millstream.model import SystemStream
from millstream.plugins import load_object
from millstream.serde.base import Serde
from millstream.serde.builtin import BytesSerde, JsonSerde, LongSerde, MsgpackSerde, StringSerde
from millstream.serde.settings import SerdeConfig

BUILTIN_SERDES: dict[str, type] = {
    "string": StringSerde,
    "bytes": BytesSerde,
    "json": JsonSerde,
    "long": LongSerde,
    "msgpack": MsgpackSerde,
}

SERDE_CLASS_ALIASES = {
    "string": "millstream.serde.builtin:StringSerde",
    "bytes": "millstream.serde.builtin:BytesSerde",
    "json": "millstream.serde.builtin:JsonSerde",
    "long": "millstream.serde.builtin:LongSerde",
    "msgpack": "millstream.serde.builtin:MsgpackSerde",
    "avro": "millstream.serde.avro:AvroSerde",
    "protobuf": "millstream.serde.protobuf:ProtobufSerde",
    "org.apache.samza.serializers.StringSerdeFactory": "millstream.serde.builtin:StringSerde",
    "org.apache.samza.serializers.ByteSerdeFactory": "millstream.serde.builtin:BytesSerde",
    "org.apache.samza.serializers.JsonSerdeV2Factory": "millstream.serde.builtin:JsonSerde",
    "org.apache.samza.serializers.JsonSerdeFactory": "millstream.serde.builtin:JsonSerde",
    "org.apache.samza.serializers.LongSerdeFactory": "millstream.serde.builtin:LongSerde",
}


@runtime_checkable
class StreamBoundSerde(Protocol):
    """A serde whose bytes depend on the stream it serves (a registry subject named after the topic)."""

    def for_stream(self, stream: SystemStream, kind: str) -> Serde: ...


class SerdeRegistry:
    def __init__(self, serdes: dict[str, Serde], config: Settings) -> None:
        self._serdes = serdes
        self._config = config

    @classmethod
    def from_config(cls, config: Settings) -> SerdeRegistry:
        serdes: dict[str, Serde] = {name: factory() for name, factory in BUILTIN_SERDES.items()}
        for rest in config.subset("serializers.registry."):
            if "." not in rest:
                raise ConfigError(
                    f"unknown config key 'serializers.registry.{rest}' (expected serializers.registry.<name>.class)"
                )
        for name in sorted({rest.split(".", 1)[0] for rest in config.subset("serializers.registry.")}):
            serdes[name] = _configured_serde(name, config)
        return cls(serdes, config)

    def get(self, name: str, where: str = "") -> Serde:
        try:
            return self._serdes[name]
        except KeyError:
            context = f" (named by {where})" if where else ""
            raise ConfigError(
                f"unknown serde '{name}'{context}; registered: {', '.join(sorted(self._serdes))} "
                "(add serializers.registry.<name>.class)"
            ) from None

    def for_stream(self, name: str, stream: SystemStream, kind: str, where: str = "") -> Serde:
        """The serde ``name`` as it serves ``stream``'s keys (``kind="key"``) or values (``"msg"``)."""
        serde = self.get(name, where)
        return serde.for_stream(stream, kind) if isinstance(serde, StreamBoundSerde) else serde

    def key_serde(self, stream: SystemStream) -> Serde | None:
        return self._stream_serde(stream, "key")

    def msg_serde(self, stream: SystemStream) -> Serde | None:
        return self._stream_serde(stream, "msg")

    def _stream_serde(self, stream: SystemStream, kind: str) -> Serde | None:
        stream_level: Any = getattr(self._config.view(StreamSamzaConfig, stream), f"{kind}_serde")
        system_level: Any = getattr(self._config.view(SystemSamzaConfig, stream.system), f"{kind}_serde")
        name = stream_level or system_level
        if name is None:
            return None
        where = (
            f"systems.{stream.system}.streams.{stream.stream}.samza.{kind}.serde"
            if stream_level
            else f"systems.{stream.system}.samza.{kind}.serde"
        )
        return self.for_stream(name, stream, kind, where)


def _configured_serde(name: str, config: Settings) -> Serde:
    """The serde ``serializers.registry.<name>.*`` configures (serde names have no dots)."""
    prefix = f"serializers.registry.{name}."
    settings = config.subset(prefix)
    if "class" not in settings:
        raise ConfigError(
            "; ".join(
                f"unknown config key '{prefix}{rest}' (expected serializers.registry.<name>.class first; "
                f"accepted under '{prefix}': {accepted_keys(SerdeConfig)})"
                for rest in sorted(settings)
            )
        )
    key = f"{prefix}class"
    class_name = config.view(SerdeConfig, name).class_name
    serde_class = load_object(class_name, key, SERDE_CLASS_ALIASES)
    from_config = getattr(serde_class, "from_config", None)
    if from_config is None and len(settings) > 1:
        extra = ", ".join(sorted(f"'{prefix}{k}'" for k in settings if k != "class"))
        raise ConfigError(f"config keys {extra}: serde '{class_name}' takes no settings")
    try:
        serde = from_config(name, config) if from_config is not None else serde_class()
    except ConfigError:
        raise
    except Exception as error:
        raise ConfigError(f"config key '{key}': cannot create serde '{class_name}': {error}") from None
    if not (hasattr(serde, "to_bytes") and hasattr(serde, "from_bytes")):
        raise ConfigError(f"config key '{key}': '{class_name}' has no to_bytes/from_bytes")
    return serde

"""Serdes by name, and the key/message serde of each stream as Samza's keys configure them.

``serializers.registry.<name>.class`` names a serde class (a built-in name, a Samza factory class
name, or ``module:Class``). A stream's serdes come from
``systems.<s>.streams.<stream>.samza.{key,msg}.serde``, else ``systems.<s>.samza.{key,msg}.serde``,
else bytes pass through untouched.
"""

from __future__ import annotations

from typing import Any

from millstream.config.core import Config
from millstream.config.views import stream_samza, system_samza
from millstream.errors import ConfigError
from millstream.model import SystemStream
from millstream.plugins import load_object
from millstream.serde.base import Serde
from millstream.serde.builtin import BytesSerde, JsonSerde, LongSerde, MsgpackSerde, StringSerde

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
    "org.apache.samza.serializers.StringSerdeFactory": "millstream.serde.builtin:StringSerde",
    "org.apache.samza.serializers.ByteSerdeFactory": "millstream.serde.builtin:BytesSerde",
    "org.apache.samza.serializers.JsonSerdeV2Factory": "millstream.serde.builtin:JsonSerde",
    "org.apache.samza.serializers.JsonSerdeFactory": "millstream.serde.builtin:JsonSerde",
    "org.apache.samza.serializers.LongSerdeFactory": "millstream.serde.builtin:LongSerde",
}


class SerdeRegistry:
    def __init__(self, serdes: dict[str, Serde], config: Config) -> None:
        self._serdes = serdes
        self._config = config

    @classmethod
    def from_config(cls, config: Config) -> SerdeRegistry:
        serdes: dict[str, Serde] = {name: factory() for name, factory in BUILTIN_SERDES.items()}
        for rest, class_name in config.subset("serializers.registry.").items():
            name, _, attribute = rest.rpartition(".")
            key = f"serializers.registry.{rest}"
            if attribute != "class" or not name:
                raise ConfigError(f"unknown config key '{key}' (expected serializers.registry.<name>.class)")
            serde_class = load_object(class_name, key, SERDE_CLASS_ALIASES)
            try:
                serde = serde_class()
            except Exception as error:
                raise ConfigError(f"config key '{key}': cannot create serde '{class_name}': {error}") from None
            if not (hasattr(serde, "to_bytes") and hasattr(serde, "from_bytes")):
                raise ConfigError(f"config key '{key}': '{class_name}' has no to_bytes/from_bytes")
            serdes[name] = serde
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

    def key_serde(self, stream: SystemStream) -> Serde | None:
        return self._stream_serde(stream, "key")

    def msg_serde(self, stream: SystemStream) -> Serde | None:
        return self._stream_serde(stream, "msg")

    def _stream_serde(self, stream: SystemStream, kind: str) -> Serde | None:
        stream_level: Any = getattr(stream_samza(self._config, stream), f"{kind}_serde")
        system_level: Any = getattr(system_samza(self._config, stream.system), f"{kind}_serde")
        name = stream_level or system_level
        if name is None:
            return None
        where = (
            f"systems.{stream.system}.streams.{stream.stream}.samza.{kind}.serde"
            if stream_level
            else f"systems.{stream.system}.samza.{kind}.serde"
        )
        return self.get(name, where)

"""Protobuf values: a generated message class's bytes, plain or in the schema-registry wire format.

Values are message instances both ways (a dict is accepted on write and parsed into the message class, so a
task can emit what it would emit as JSON). Plain Protobuf needs the same message class on both ends; with
``schema.registry.url`` the value carries its schema id and message indexes for other clients.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, EncodeError, Message

from millstream.config.core import Config
from millstream.config.settings import Settings
from millstream.errors import ConfigError
from millstream.plugins import load_object
from millstream.serde.base import Serde, SerdeError
from millstream.serde.settings import SerdeConfig


def message_class(name: str, class_name: str | None) -> type[Message]:
    """The generated message class ``serializers.registry.<name>.message.class`` names."""
    key = f"serializers.registry.{name}.message.class"
    if not class_name:
        raise ConfigError(f"serde '{name}': set {key} to the generated message class (module:Class)")
    loaded = load_object(class_name, key)
    if not (isinstance(loaded, type) and issubclass(loaded, Message)):
        raise ConfigError(f"config key '{key}': '{class_name}' is not a generated protobuf message class")
    return loaded


def as_message(obj: Any, message_type: type[Message], serde: str) -> Message:
    """``obj`` as a ``message_type`` instance: itself, or a dict parsed field by field."""
    if isinstance(obj, message_type):
        return obj
    if isinstance(obj, dict):
        try:
            return json_format.ParseDict(obj, message_type())
        except json_format.ParseError as error:
            raise SerdeError(f"protobuf serde '{serde}': the dict is not a {message_type.__name__}: {error}") from None
    raise SerdeError(
        f"protobuf serde '{serde}' expects {message_type.DESCRIPTOR.full_name} or a dict, got {type(obj).__name__}"
    )


class ProtobufSerde:
    """A message's own binary encoding, without framing."""

    def __init__(self, message_type: type[Message], name: str = "protobuf") -> None:
        self.message_type = message_type
        self.name = name

    @classmethod
    def from_config(cls, name: str, config: Settings) -> Serde:
        """The plain serde, or with ``schema.registry.url`` the registry one (whose client is imported only then)."""
        settings = config.view(SerdeConfig, name)
        message_type = message_class(name, settings.message_class)
        if settings.registry_url:
            return _registry_serde(name, settings, message_type, config)
        return cls(message_type, name)

    def to_bytes(self, obj: Any) -> bytes:
        message = as_message(obj, self.message_type, self.name)
        try:
            return message.SerializeToString()
        except EncodeError as error:
            raise SerdeError(f"protobuf serde '{self.name}': cannot encode: {error}") from None

    def from_bytes(self, data: bytes) -> Any:
        try:
            return self.message_type.FromString(data)
        except (DecodeError, ValueError) as error:
            raise SerdeError(
                f"protobuf serde '{self.name}': not a {self.message_type.DESCRIPTOR.full_name}: {error}"
            ) from None


def _registry_serde(name: str, settings: SerdeConfig, message_type: type[Message], config: Config) -> Serde:
    """Protobuf behind the registry: values are instances of ``message_type`` (dicts are parsed into it).
    The registry client is imported here, so plain Protobuf needs only protobuf."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    from millstream.serde.schema_registry import (
        VALUE_ERRORS,
        SchemaRegistrySerde,
        deserializer_conf,
        registry_client,
        serializer_conf,
    )

    client = registry_client(name, settings, config)
    try:
        serializer = ProtobufSerializer(message_type, client, conf=serializer_conf(settings))
        deserializer = ProtobufDeserializer(message_type, conf=deserializer_conf(settings))
    except (ValueError, TypeError) as error:
        raise ConfigError(f"serde '{name}': {error}") from None
    return SchemaRegistrySerde(
        name,
        "protobuf",
        settings,
        serializer,
        deserializer,
        message_type.DESCRIPTOR.full_name,
        value_errors=(*VALUE_ERRORS, DecodeError),
        prepare=lambda obj: as_message(obj, message_type, name),
    )

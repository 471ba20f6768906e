"""Avro values: plain binary Avro with the schema from config, or the schema-registry wire format.

Plain Avro carries no schema id, so writer and reader must agree on the schema out of band (the config);
that suits streams only millstream jobs read. Streams other Kafka clients share use a registry
(``schema.registry.url``), where each value names the schema it was written with.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import fastavro
import orjson
from fastavro.types import Schema

from millstream.config.core import Config
from millstream.config.settings import Settings
from millstream.errors import ConfigError
from millstream.serde.base import Serde, SerdeError
from millstream.serde.settings import SerdeConfig

# What fastavro raises for a value that does not fit the schema, or for bytes that are not Avro of it.
_AVRO_ERRORS = (ValueError, TypeError, KeyError, IndexError, EOFError, OverflowError, AttributeError)


def schema_text(settings: SerdeConfig, name: str) -> str | None:
    """The Avro schema of ``serializers.registry.<name>``: inline ``schema`` or the file at ``schema.path``."""
    prefix = f"serializers.registry.{name}."
    if settings.avro_schema is not None and settings.schema_path is not None:
        raise ConfigError(f"config keys '{prefix}schema' and '{prefix}schema.path': set one of them, not both")
    if settings.schema_path is not None:
        try:
            return Path(settings.schema_path).read_text()
        except OSError as error:
            raise ConfigError(f"config key '{prefix}schema.path': cannot read the schema: {error}") from None
    return settings.avro_schema


def parse_schema(text: str, where: str) -> Schema:
    """A parsed Avro schema; ``where`` is the config key it came from, for the error."""
    try:
        return fastavro.parse_schema(orjson.loads(text))
    except (orjson.JSONDecodeError, fastavro.schema.SchemaParseException, ValueError, TypeError) as error:
        raise ConfigError(f"config key '{where}': not a valid Avro schema: {error}") from None


class AvroSerde:
    """Schemaless binary Avro (no header, no schema id): the value exactly as Avro encodes it.

    ``from_bytes`` refuses trailing bytes, so a value written in another format (a registry-framed one,
    say) fails to decode instead of decoding into a wrong record.
    """

    def __init__(self, schema: Schema, name: str = "avro") -> None:
        self.schema = schema
        self.name = name

    @classmethod
    def from_config(cls, name: str, config: Settings) -> Serde:
        """The plain serde, or with ``schema.registry.url`` the registry one (whose client is imported only then)."""
        settings = config.view(SerdeConfig, name)
        text = schema_text(settings, name)
        if settings.registry_url:
            return _registry_serde(name, settings, text, config)
        if text is None:
            raise ConfigError(
                f"serde '{name}': set serializers.registry.{name}.schema or .schema.path "
                "(plain Avro has no registry to take the schema from)"
            )
        return cls(parse_schema(text, f"serializers.registry.{name}.schema"), name)

    def to_bytes(self, obj: Any) -> bytes:
        buffer = io.BytesIO()
        try:
            fastavro.schemaless_writer(buffer, self.schema, obj)
        except _AVRO_ERRORS as error:
            raise SerdeError(
                f"avro serde '{self.name}': the value does not fit schema {_name(self.schema)}: {error}"
            ) from None
        return buffer.getvalue()

    def from_bytes(self, data: bytes) -> Any:
        buffer = io.BytesIO(data)
        try:
            record = fastavro.schemaless_reader(buffer, self.schema, None)
        except _AVRO_ERRORS as error:
            raise SerdeError(
                f"avro serde '{self.name}': not Avro of schema {_name(self.schema)}: {type(error).__name__}: {error}"
            ) from None
        if buffer.tell() != len(data):
            raise SerdeError(
                f"avro serde '{self.name}': {len(data) - buffer.tell()} bytes left after a record of schema "
                f"{_name(self.schema)} (written with another schema or format?)"
            )
        return record


def _registry_serde(name: str, settings: SerdeConfig, schema: str | None, config: Config) -> Serde:
    """Avro behind the registry. Without a schema the serde only reads (with each value's writer schema),
    unless ``use.latest.version`` lets it write with the subject's latest one. The registry client is
    imported here, so plain Avro needs only fastavro."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

    from millstream.serde.schema_registry import (
        SchemaRegistrySerde,
        deserializer_conf,
        registry_client,
        serializer_conf,
    )

    record_name = None
    if schema is not None:
        record_name = _name(parse_schema(schema, f"serializers.registry.{name}.schema"))
    client = registry_client(name, settings, config)
    try:
        serializer = (
            AvroSerializer(client, schema, conf=serializer_conf(settings))
            if schema is not None or settings.use_latest_version
            else None
        )
        deserializer = AvroDeserializer(client, schema, conf=deserializer_conf(settings))
    except (ValueError, TypeError) as error:
        raise ConfigError(f"serde '{name}': {error}") from None
    return SchemaRegistrySerde(name, "avro", settings, serializer, deserializer, record_name)


def _name(schema: Schema) -> str:
    return str(schema.get("name", schema.get("type"))) if isinstance(schema, dict) else str(schema)

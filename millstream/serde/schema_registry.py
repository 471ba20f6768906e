"""The Confluent wire format, through confluent-kafka's schema-registry client and serializers.

A value is magic byte 0, the schema's 4-byte big-endian registry id, for Protobuf the message-index array,
then the payload; any Confluent client reads what these serdes write and the other way round. The client
keeps ids and schemas for the life of the container (they never change in a registry) and the latest
version of a subject for ``schema.registry.latest.ttl.s``.

Errors keep three causes apart, because the run loop treats them differently:

- a value that does not fit the schema, or bytes that are not a registry-framed value of it, or that name
  a schema id the registry does not know: ``SerdeError``, so the deserialization-error policy applies and
  the run loop names the stream, partition and offset;
- the registry refusing the job's schema (not registered under the subject while ``auto.register.schemas``
  is off, incompatible with the subject's versions): ``SchemaRegistryRefusedError``, failing the container
  whatever the error policy, since every value would fail the same way;
- the registry out of reach: ``SchemaRegistryUnavailableError``, failing the container so Spark retries it
  rather than skipping records that are fine.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    SchemaRegistryError,
    record_subject_name_strategy,
    topic_record_subject_name_strategy,
    topic_subject_name_strategy,
)
from confluent_kafka.serialization import MessageField, SerializationContext, SerializationError

from millstream.config.core import Config
from millstream.config.secrets import SENSITIVE_PREFIX
from millstream.errors import ConfigError, MillstreamError
from millstream.model import SystemStream
from millstream.serde.base import SerdeError
from millstream.serde.settings import SerdeConfig

STRATEGIES: dict[str, Callable[[SerializationContext | None, str | None], str | None]] = {
    "TopicNameStrategy": topic_subject_name_strategy,
    "RecordNameStrategy": record_subject_name_strategy,
    "TopicRecordNameStrategy": topic_record_subject_name_strategy,
}
# What the serializers raise for a value, or bytes, that do not fit: the value's fault, not the registry's.
VALUE_ERRORS: tuple[type[Exception], ...] = (
    SerializationError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    EOFError,
    OverflowError,
)
_SCHEMA_NOT_FOUND = 40403


class SchemaRegistryRefusedError(MillstreamError):
    """The registry refused the job's schema for a subject: not registered, or incompatible."""


class SchemaRegistryUnavailableError(MillstreamError):
    """The registry could not be asked: the container fails and is retried instead of skipping records."""


def registry_client(name: str, settings: SerdeConfig, config: Config) -> SchemaRegistryClient:
    """One client per serde, created without contacting the registry (that happens at the first value)."""
    conf: dict[str, Any] = {"url": settings.registry_url}
    if settings.registry_latest_ttl_s:
        conf["cache.latest.ttl.sec"] = settings.registry_latest_ttl_s
    credentials = config.get(f"{SENSITIVE_PREFIX}serializers.registry.{name}.schema.registry.basic.auth.user.info")
    if credentials:
        conf["basic.auth.user.info"] = credentials
    try:
        return SchemaRegistryClient(conf)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"serde '{name}': invalid schema registry settings: {error}") from None


def serializer_conf(settings: SerdeConfig) -> dict[str, Any]:
    """confluent-kafka's serializer settings from ours."""
    return {
        "auto.register.schemas": settings.auto_register_schemas,
        "use.latest.version": settings.use_latest_version,
        "subject.name.strategy": STRATEGIES[settings.subject_name_strategy],
    }


def deserializer_conf(settings: SerdeConfig) -> dict[str, Any]:
    """confluent-kafka's deserializer settings from ours: the reader's schema is the configured one, never
    the subject's latest (which could be newer than the job's code expects)."""
    return {"subject.name.strategy": STRATEGIES[settings.subject_name_strategy]}


class SchemaRegistrySerde:
    """A registry serde, bound to a stream by ``for_stream``: the subject comes from the topic (the stream's
    name) and from whether it serdes keys or values, as Confluent's serializers derive it.

    Bound copies share the registry client and the serializers, so ids are cached once per serde; the
    serializers are thread-safe (they lock their caches).
    """

    def __init__(
        self,
        name: str,
        format_name: str,
        settings: SerdeConfig,
        serializer: Callable[[Any, SerializationContext], bytes | None] | None,
        deserializer: Callable[[bytes, SerializationContext], Any],
        record_name: str | None,
        *,
        value_errors: tuple[type[Exception], ...] = VALUE_ERRORS,
        prepare: Callable[[Any], Any] | None = None,
    ) -> None:
        self.name = name
        self.format_name = format_name
        self.settings = settings
        self._serializer = serializer
        self._deserializer = deserializer
        self.record_name = record_name
        self._value_errors = value_errors
        self._prepare = prepare
        self.stream: SystemStream | None = None
        self.field = MessageField.VALUE

    def for_stream(self, stream: SystemStream, kind: str) -> SchemaRegistrySerde:
        bound = copy.copy(self)
        bound.stream = stream
        bound.field = MessageField.KEY if kind == "key" else MessageField.VALUE
        return bound

    def to_bytes(self, obj: Any) -> bytes:
        if self._serializer is None:
            raise SerdeError(
                f"{self._what()} has no schema to write with (set serializers.registry.{self.name}.schema, "
                "or use.latest.version=true)"
            )
        if self._prepare is not None:
            obj = self._prepare(obj)
        context = self._context()
        try:
            data = self._serializer(obj, context)
        except SchemaRegistryError as error:
            raise self._refused(error) from None
        except self._value_errors as error:
            raise SerdeError(f"{self._what()}: cannot encode the value: {error}") from None
        except Exception as error:
            raise self._unavailable(error) from None
        if data is None:
            raise SerdeError(f"{self._what()}: the serializer wrote nothing for {type(obj).__name__}")
        return data

    def from_bytes(self, data: bytes) -> Any:
        context = self._context()
        try:
            return self._deserializer(data, context)
        except SchemaRegistryError as error:
            if error.error_code == _SCHEMA_NOT_FOUND or error.http_status_code == 404:
                raise SerdeError(
                    f"{self._what()}: the value names schema id {_schema_id(data)}, which the registry at "
                    f"{self.settings.registry_url} does not have: {error.error_message}"
                ) from None
            raise self._unavailable(error) from None
        except self._value_errors as error:
            raise SerdeError(
                f"{self._what()}: not a registry-framed {self.format_name} value "
                f"(first bytes {data[:6].hex()}): {error}"
            ) from None
        except Exception as error:
            raise self._unavailable(error) from None

    def _context(self) -> SerializationContext:
        if self.stream is None and self.settings.subject_name_strategy != "RecordNameStrategy":
            raise SerdeError(
                f"serde '{self.name}' uses {self.settings.subject_name_strategy}, which needs a stream's topic: "
                "use it as a stream's key.serde or msg.serde, or set subject.name.strategy=RecordNameStrategy"
            )
        return SerializationContext(self.stream.stream if self.stream else "", self.field)

    def subject(self) -> str | None:
        """The subject this serde writes under, as the configured strategy derives it."""
        strategy = STRATEGIES[self.settings.subject_name_strategy]
        try:
            return strategy(self._context(), self.record_name)
        except SerdeError:
            return None

    def _what(self) -> str:
        where = f" for {self.field.value}s of stream '{self.stream}'" if self.stream else ""
        return f"{self.format_name} serde '{self.name}'{where}"

    def _refused(self, error: SchemaRegistryError) -> SchemaRegistryRefusedError:
        subject = self.subject()
        if error.http_status_code == 409:
            hint = "it is incompatible with the subject's registered versions under its compatibility level"
        elif error.http_status_code == 404 and not self.settings.auto_register_schemas:
            hint = (
                "it is not registered under the subject; register it, or set "
                f"serializers.registry.{self.name}.auto.register.schemas=true"
            )
        else:
            hint = "the registry refused it"
        return SchemaRegistryRefusedError(
            f"{self._what()}: schema {self.record_name or '(latest version)'} for subject '{subject}' at "
            f"{self.settings.registry_url}: {hint} ({error})"
        )

    def _unavailable(self, error: BaseException) -> SchemaRegistryUnavailableError:
        return SchemaRegistryUnavailableError(
            f"{self._what()}: the schema registry at {self.settings.registry_url} could not be asked "
            f"(subject '{self.subject()}'): {type(error).__name__}: {error}"
        )


def _schema_id(data: bytes) -> str:
    return str(int.from_bytes(data[1:5], "big")) if len(data) >= 5 and data[0] == 0 else "(no framing)"

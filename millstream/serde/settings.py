"""``serializers.registry.<name>.``: the schema of a named serde's keys, beside the serdes that read it.

Read through the job's settings (``settings.view(...)``, ``millstream.config.settings``), which parse it once."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from millstream.config.views import Bool, ConfigView

SubjectNameStrategy = Literal["TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy"]


class SerdeConfig(ConfigView):
    """``serializers.registry.<name>.*``: a named serde, and for the schema serdes (``avro``, ``protobuf``)
    their schema and the schema registry they use. Keys other than ``class`` are refused for serdes that
    take no settings."""

    SECTION: ClassVar[str] = "serializers.registry.{name}."

    class_name: str = Field(alias="class")
    """A built-in serde (``string``, ``bytes``, ``json``, ``long``, ``msgpack``, ``avro``, ``protobuf``), a Samza
    serde factory class name, or ``module:Class``."""
    avro_schema: str | None = Field(None, alias="schema")
    """``avro``: the Avro schema as JSON text. Without a registry it is both the writer's and the reader's
    schema; with one it is what producers register or look up, and the reader's schema consumers decode to
    (a newer compatible schema reads older records)."""
    schema_path: str | None = Field(None, alias="schema.path")
    """``avro``: a file holding the Avro schema (``.avsc``), instead of ``schema``; relative to the config file."""
    message_class: str | None = Field(None, alias="message.class")
    """``protobuf``: the generated message class (``module:Class``) values are encoded from and decoded to."""
    registry_url: str | None = Field(None, alias="schema.registry.url")
    """The Confluent-compatible schema registry (comma-separated URLs). Set, values use the Confluent wire format
    (magic byte 0, the 4-byte schema id, for Protobuf the message indexes, then the payload); unset, plain Avro
    or Protobuf bytes with the schema from this config. Credentials go in
    ``sensitive.serializers.registry.<name>.schema.registry.basic.auth.user.info`` (``user:password``)."""
    subject_name_strategy: SubjectNameStrategy = Field("TopicNameStrategy", alias="subject.name.strategy")
    """The registry subject of a stream's schemas: ``TopicNameStrategy`` (``<topic>-value`` / ``<topic>-key``),
    ``RecordNameStrategy`` (the record's full name) or ``TopicRecordNameStrategy`` (``<topic>-<record name>``),
    as Confluent's serializers name them."""
    auto_register_schemas: Bool = Field(False, alias="auto.register.schemas")
    """Producing registers the schema under its subject when it is not there yet. Off by default, unlike
    Confluent's serializers: a job then only writes schemas someone registered (and the registry checked for
    compatibility) on purpose, and a job started with a wrong schema fails at its first message naming the
    subject instead of evolving the subject behind the consumers' backs."""
    use_latest_version: Bool = Field(False, alias="use.latest.version")
    """Producing writes with the subject's latest registered version instead of looking up this config's
    schema (which then may be omitted for Avro)."""
    registry_latest_ttl_s: int = Field(300, alias="schema.registry.latest.ttl.s", ge=0)
    """How long a subject's latest version (``use.latest.version``) is kept before the registry is asked again;
    0 keeps it for the life of the container. Ids and schemas never change in a registry, so they are kept
    for the life of the container."""

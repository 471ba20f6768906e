"""The registry serdes against a Confluent-compatible registry over HTTP (the stand-in of
``tests/integration/schema_registry.py``): the Confluent wire format, interop with confluent-kafka's own
serializers both ways, subject naming strategies, caching, schema evolution, and each kind of failure
surfacing as what it is (a bad value, a refused schema, an unreachable registry) naming subject and stream."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from millstream.config.settings import Settings
from millstream.model import SystemStream
from millstream.serde.base import Serde, SerdeError
from millstream.serde.registry import SerdeRegistry
from millstream.serde.schema_registry import SchemaRegistryRefusedError, SchemaRegistryUnavailableError
from tests.integration.schema_registry import SchemaRegistryServer
from tests.serde.messages import Click, PageView

V1 = {
    "type": "record",
    "name": "PageView",
    "namespace": "shop",
    "fields": [{"name": "user", "type": "string"}, {"name": "ts", "type": "long"}],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "page", "type": "string", "default": "/"}]}
V2_NO_DEFAULT = {**V1, "fields": [*V1["fields"], {"name": "page", "type": "string"}]}


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]


def serdes(url: str, topic: str, serde: dict[str, Any], kind: str = "msg") -> Serde:
    values = {f"serializers.registry.s.{key}": value for key, value in serde.items()}
    values["serializers.registry.s.schema.registry.url"] = url
    values[f"systems.kafka.streams.{topic}.samza.{kind}.serde"] = "s"
    registry = SerdeRegistry.from_config(Settings(values))
    stream = SystemStream("kafka", topic)
    found = registry.key_serde(stream) if kind == "key" else registry.msg_serde(stream)
    assert found is not None
    return found


def avro(url: str, topic: str, schema: dict[str, Any] | None = None, **settings: str) -> Serde:
    settings = {"class": "avro", **{key.replace("__", "."): value for key, value in settings.items()}}
    if schema is not None:
        settings["schema"] = json.dumps(schema)
    return serdes(url, topic, settings)


def value_context(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def test_avro_values_are_magic_byte_schema_id_then_the_avro_payload(schema_registry: SchemaRegistryServer, topic):
    serde = avro(schema_registry.url, topic, V1, auto__register__schemas="true")
    data = serde.to_bytes({"user": "ada", "ts": 7})
    schema_id = schema_registry.state.subjects[f"{topic}-value"].versions[0]
    assert data[:5] == b"\x00" + struct.pack(">I", schema_id)
    assert data[5:] == b"\x06ada\x0e"  # Avro: string length 3 zig-zag, "ada", long 7 zig-zag
    assert serde.from_bytes(data) == {"user": "ada", "ts": 7}


def test_protobuf_values_carry_the_message_index_after_the_schema_id(schema_registry: SchemaRegistryServer, topic):
    view = serdes(schema_registry.url, topic, protobuf_settings("PageView"))
    click = serdes(schema_registry.url, topic + "-c", protobuf_settings("Click"))
    view_bytes, click_bytes = view.to_bytes(PageView(user="ada", ts=7)), click.to_bytes(Click(target="buy"))
    assert view_bytes[0] == 0 and view_bytes[5] == 0  # the file's first message: the index array [0] is one 0
    assert click_bytes[0] == 0 and click_bytes[5:7] == b"\x02\x02"  # [1]: length 1 and index 1, zig-zag varints
    assert view_bytes[6:] == PageView(user="ada", ts=7).SerializeToString()
    assert view.from_bytes(view_bytes) == PageView(user="ada", ts=7)
    assert click.from_bytes(click_bytes) == Click(target="buy")


def protobuf_settings(message: str) -> dict[str, str]:
    return {"class": "protobuf", "message.class": f"tests.serde.messages:{message}", "auto.register.schemas": "true"}


def test_avro_interoperates_with_confluent_kafkas_own_serializers(schema_registry: SchemaRegistryServer, topic):
    client = SchemaRegistryClient({"url": schema_registry.url})
    theirs = AvroSerializer(client, json.dumps(V1))  # Confluent's default: auto-registers
    ours = avro(schema_registry.url, topic, V1)
    written_by_them = theirs({"user": "ada", "ts": 1}, value_context(topic))
    assert ours.from_bytes(written_by_them) == {"user": "ada", "ts": 1}
    written_by_us = ours.to_bytes({"user": "bob", "ts": 2})
    assert AvroDeserializer(client)(written_by_us, value_context(topic)) == {"user": "bob", "ts": 2}


def test_protobuf_interoperates_with_confluent_kafkas_own_serializers(schema_registry: SchemaRegistryServer, topic):
    client = SchemaRegistryClient({"url": schema_registry.url})
    theirs = ProtobufSerializer(PageView, client)
    ours = serdes(schema_registry.url, topic, protobuf_settings("PageView"))
    assert ours.from_bytes(theirs(PageView(user="ada", ts=1), value_context(topic))) == PageView(user="ada", ts=1)
    decoded = ProtobufDeserializer(PageView)(ours.to_bytes(PageView(user="bob")), value_context(topic))
    assert decoded == PageView(user="bob")


@pytest.mark.parametrize(
    ("strategy", "subject"),
    [
        ("TopicNameStrategy", "{topic}-value"),
        ("RecordNameStrategy", "shop.PageView"),
        ("TopicRecordNameStrategy", "{topic}-shop.PageView"),
    ],
)
def test_subject_naming_strategies_name_the_subject_as_confluents_do(
    schema_registry: SchemaRegistryServer, topic, strategy: str, subject: str
):
    topic = f"{topic}-{strategy}"
    serde = avro(schema_registry.url, topic, V1, auto__register__schemas="true", subject__name__strategy=strategy)
    serde.to_bytes({"user": "ada", "ts": 1})
    assert subject.format(topic=topic) in schema_registry.state.subjects


def test_a_key_serde_registers_under_the_key_subject(schema_registry: SchemaRegistryServer, topic):
    settings = {"class": "avro", "schema": '"string"', "auto.register.schemas": "true"}
    key = serdes(schema_registry.url, topic, settings, kind="key")
    assert key.from_bytes(key.to_bytes("k1")) == "k1"
    assert f"{topic}-key" in schema_registry.state.subjects


def test_ids_and_schemas_are_asked_once_per_serde_not_per_value(schema_registry: SchemaRegistryServer, topic):
    writer = avro(schema_registry.url, topic, V1, auto__register__schemas="true")
    reader = avro(schema_registry.url, topic)
    before = len(schema_registry.state.requests)
    for ts in range(200):
        assert reader.from_bytes(writer.to_bytes({"user": "ada", "ts": ts}))["ts"] == ts
    asked = schema_registry.state.requests[before:]
    assert asked == [f"POST /subjects/{topic}-value/versions", f"GET /schemas/ids/{_id(schema_registry, topic)}"]


def _id(registry: SchemaRegistryServer, topic: str) -> int:
    return registry.state.subjects[f"{topic}-value"].versions[-1]


def test_a_reader_with_a_newer_compatible_schema_reads_old_records_with_defaults(
    schema_registry: SchemaRegistryServer, topic
):
    old_writer = avro(schema_registry.url, topic, V1, auto__register__schemas="true")
    new_writer = avro(schema_registry.url, topic, V2, auto__register__schemas="true")
    new_reader = avro(schema_registry.url, topic, V2)
    assert new_reader.from_bytes(old_writer.to_bytes({"user": "ada", "ts": 1})) == {"user": "ada", "ts": 1, "page": "/"}
    assert new_reader.from_bytes(new_writer.to_bytes({"user": "bob", "ts": 2, "page": "/x"}))["page"] == "/x"
    assert len(schema_registry.state.subjects[f"{topic}-value"].versions) == 2


def test_an_incompatible_schema_fails_the_job_naming_subject_and_stream(schema_registry: SchemaRegistryServer, topic):
    avro(schema_registry.url, topic, V1, auto__register__schemas="true").to_bytes({"user": "ada", "ts": 1})
    incompatible = avro(schema_registry.url, topic, V2_NO_DEFAULT, auto__register__schemas="true")
    with pytest.raises(SchemaRegistryRefusedError) as raised:
        incompatible.to_bytes({"user": "ada", "ts": 1, "page": "/"})
    message = str(raised.value)
    assert f"subject '{topic}-value'" in message and f"stream 'kafka.{topic}'" in message
    assert "incompatible" in message
    assert not isinstance(raised.value, SerdeError), "a refused schema must fail the job, not skip records"


def test_without_auto_register_an_unregistered_schema_fails_naming_the_subject_and_the_key_to_set(
    schema_registry: SchemaRegistryServer, topic
):
    serde = avro(schema_registry.url, topic, V1)
    with pytest.raises(SchemaRegistryRefusedError, match=rf"subject '{topic}-value'.*auto\.register\.schemas=true"):
        serde.to_bytes({"user": "ada", "ts": 1})
    assert f"{topic}-value" not in schema_registry.state.subjects, "nothing registered behind the user's back"
    client = SchemaRegistryClient({"url": schema_registry.url})
    client.register_schema(f"{topic}-value", Schema(json.dumps(V1), "AVRO"))
    fresh = avro(schema_registry.url, topic, V1)
    assert fresh.from_bytes(fresh.to_bytes({"user": "ada", "ts": 1})) == {"user": "ada", "ts": 1}


def test_use_latest_version_writes_with_the_subjects_latest_schema(schema_registry: SchemaRegistryServer, topic):
    SchemaRegistryClient({"url": schema_registry.url}).register_schema(f"{topic}-value", Schema(json.dumps(V1), "AVRO"))
    serde = avro(schema_registry.url, topic, use__latest__version="true")
    assert serde.from_bytes(serde.to_bytes({"user": "ada", "ts": 3})) == {"user": "ada", "ts": 3}


def test_a_value_naming_an_unknown_schema_id_is_a_serde_error_naming_the_id(
    schema_registry: SchemaRegistryServer, topic
):
    with pytest.raises(SerdeError, match="names schema id 99999, which the registry"):
        avro(schema_registry.url, topic).from_bytes(b"\x00" + struct.pack(">I", 99999) + b"\x06ada\x02")


@pytest.mark.parametrize("data", [b"\x06ada\x02", b"\x01\x00\x00\x00\x01\x06ada\x02"], ids=["unframed", "bad-magic"])
def test_bytes_without_the_wire_format_are_a_serde_error(schema_registry: SchemaRegistryServer, topic, data: bytes):
    with pytest.raises(SerdeError, match=f"stream 'kafka.{topic}'"):
        avro(schema_registry.url, topic).from_bytes(data)


def test_an_unreachable_registry_fails_the_container_instead_of_skipping_records(topic):
    from tests.integration.processes import free_port

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SchemaRegistryUnavailableError, match=f"registry at {url} could not be asked"):
        avro(url, topic).from_bytes(b"\x00\x00\x00\x00\x01\x06ada\x02")


def test_credentials_from_the_sensitive_key_reach_the_registry(schema_registry: SchemaRegistryServer, topic):
    secret_key = "sensitive.serializers.registry.s.schema.registry.basic.auth.user.info"
    values = {
        "serializers.registry.s.class": "avro",
        "serializers.registry.s.schema": json.dumps(V1),
        "serializers.registry.s.schema.registry.url": schema_registry.url,
        "serializers.registry.s.auto.register.schemas": "true",
        f"systems.kafka.streams.{topic}.samza.msg.serde": "s",
        secret_key: "ada:s3cret",
    }
    serde = SerdeRegistry.from_config(Settings(values)).msg_serde(SystemStream("kafka", topic))
    assert serde is not None
    serde.to_bytes({"user": "ada", "ts": 1})
    assert "Basic " + base64.b64encode(b"ada:s3cret").decode() in schema_registry.state.authorizations


def test_a_topic_named_subject_needs_a_stream_but_a_record_named_one_serves_stores_too(
    schema_registry: SchemaRegistryServer,
):
    def unbound(**settings: str) -> Serde:
        values = {
            "serializers.registry.s.class": "avro",
            "serializers.registry.s.schema": json.dumps(V1),
            "serializers.registry.s.schema.registry.url": schema_registry.url,
            "serializers.registry.s.auto.register.schemas": "true",
        }
        values.update({f"serializers.registry.s.{key.replace('__', '.')}": value for key, value in settings.items()})
        return SerdeRegistry.from_config(Settings(values)).get("s")

    with pytest.raises(SerdeError, match="uses TopicNameStrategy, which needs a stream's topic"):
        unbound().to_bytes({"user": "ada", "ts": 1})
    store_serde = unbound(subject__name__strategy="RecordNameStrategy")
    assert store_serde.from_bytes(store_serde.to_bytes({"user": "ada", "ts": 1})) == {"user": "ada", "ts": 1}
    assert "shop.PageView" in schema_registry.state.subjects

"""Avro and Protobuf behind a schema registry in real jobs on the real Kafka broker, in-process and through
the Spark runner: records other Confluent clients wrote are read, evolved to the job's newer reader schema and
written back in the wire format those clients read; an undecodable record goes through the deserialization
error policy naming its offset."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from millstream.config import Config
from millstream.coordinator.job_result import JobResult
from millstream.spark.run.runner import SparkJobRunner
from millstream.testing import InProcessRunner
from tests.helpers import wait_until
from tests.integration.kafka.helpers import create_topic, job_config, produce, read_all
from tests.integration.schema_registry import SchemaRegistryServer
from tests.serde.messages import PageView

V1 = {
    "type": "record",
    "name": "PageView",
    "namespace": "shop",
    "fields": [{"name": "user", "type": "string"}, {"name": "ts", "type": "long"}],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "page", "type": "string", "default": "/"}]}


class Running:
    """A job in a background thread, stopped by the test once the output holds what it waits for."""

    def __init__(self, runner: InProcessRunner | SparkJobRunner) -> None:
        self.runner = runner
        self.outcome: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.outcome["result"] = self.runner.run()
        except BaseException as error:
            self.outcome["error"] = error

    def stop(self, timeout: float = 120) -> JobResult:
        self.runner.request_stop()
        return self.wait(timeout)

    def wait(self, timeout: float = 120) -> JobResult:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the job did not stop"
        if "error" in self.outcome:
            raise self.outcome["error"]
        return self.outcome["result"]


def avro_job(bootstrap: str, registry: str, tmp_path, source: str, sink: str, **extra: Any) -> Config:
    """Reads ``source`` with the V2 reader schema, writes ``sink`` with V2, registering it (the job owns sink)."""
    return job_config(
        bootstrap,
        tmp_path,
        source,
        sink,
        task__class="tests.integration.kafka.jobs:KafkaCopy",
        systems__kafka__samza__msg__serde="pageview",
        serializers__registry__pageview__class="avro",
        serializers__registry__pageview__schema=json.dumps(V2),
        **{
            "serializers__registry__pageview__schema__registry__url": registry,
            "serializers__registry__pageview__auto__register__schemas": "true",
            **extra,
        },
    )


def produce_avro_v1(bootstrap: str, registry: str, topic: str, users: list[str]) -> None:
    """What another team's producer writes: V1 records through confluent-kafka's own serializer."""
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry}), json.dumps(V1))
    context = SerializationContext(topic, MessageField.VALUE)
    produce(
        bootstrap,
        topic,
        [(user.encode(), serializer({"user": user, "ts": ts}, context)) for ts, user in enumerate(users)],
    )


def read_avro(bootstrap: str, registry: str, topic: str) -> list[dict[str, Any]]:
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry}))
    context = SerializationContext(topic, MessageField.VALUE)
    return [deserializer(message.value(), context) for message in read_all(bootstrap, topic, 1)]


def setup(bootstrap: str, topic_name) -> tuple[str, str]:
    source, sink = topic_name("in"), topic_name("out")
    create_topic(bootstrap, source)
    create_topic(bootstrap, sink)
    return source, sink


def test_an_in_process_job_reads_confluent_avro_evolves_it_and_writes_what_confluent_clients_read(
    bootstrap, schema_registry: SchemaRegistryServer, topic_name, tmp_path
):
    source, sink = setup(bootstrap, topic_name)
    users = [f"u{i}" for i in range(50)]
    produce_avro_v1(bootstrap, schema_registry.url, source, users)
    job = Running(InProcessRunner(avro_job(bootstrap, schema_registry.url, tmp_path, source, sink)))
    try:
        wait_until(lambda: len(read_avro(bootstrap, schema_registry.url, sink)) >= 50, 60, "50 records in the output")
    finally:
        result = job.stop()
    assert result.outcome == "stopped", result.error
    assert read_avro(bootstrap, schema_registry.url, sink) == [
        {"user": u, "ts": t, "page": "/"} for t, u in enumerate(users)
    ]
    assert schema_registry.state.subjects[f"{sink}-value"].versions, "the job registered its output schema"


def test_an_undecodable_record_fails_the_job_naming_its_offset_or_is_skipped_when_configured(
    bootstrap, schema_registry: SchemaRegistryServer, topic_name, tmp_path
):
    source, sink = setup(bootstrap, topic_name)
    produce_avro_v1(bootstrap, schema_registry.url, source, ["a", "b"])
    produce(bootstrap, source, [(b"bad", b'{"user": "json, not avro"}')])  # offset 2
    produce_avro_v1(bootstrap, schema_registry.url, source, ["c"])

    failing = Running(InProcessRunner(avro_job(bootstrap, schema_registry.url, tmp_path / "fail", source, sink)))
    result = failing.wait()
    assert result.outcome == "failed"
    assert f"offset 2 of stream 'kafka.{source}' partition 0" in str(result.error)
    assert "not a registry-framed avro value" in str(result.error)

    config = avro_job(
        bootstrap, schema_registry.url, tmp_path / "skip", source, sink, task__drop__deserialization__errors="true"
    )
    skipping = Running(InProcessRunner(config))
    try:
        wait_until(lambda: len(read_avro(bootstrap, schema_registry.url, sink)) >= 3, 60, "the 3 good records")
    finally:
        assert skipping.stop().outcome == "stopped"
    assert [record["user"] for record in read_avro(bootstrap, schema_registry.url, sink)] == ["a", "b", "c"]


@pytest.mark.spark
def test_a_spark_job_round_trips_protobuf_through_the_registry(bootstrap, schema_registry, topic_name, tmp_path, spark):
    source, sink = setup(bootstrap, topic_name)
    serializer = ProtobufSerializer(PageView, SchemaRegistryClient({"url": schema_registry.url}))
    views = [PageView(user=f"u{i}", page=f"/p{i}", ts=i) for i in range(30)]
    context = SerializationContext(source, MessageField.VALUE)
    produce(bootstrap, source, [(view.user.encode(), serializer(view, context)) for view in views])
    config = job_config(
        bootstrap,
        tmp_path,
        source,
        sink,
        task__class="tests.integration.kafka.jobs:KafkaCopy",
        systems__kafka__samza__msg__serde="views",
        serializers__registry__views__class="protobuf",
        serializers__registry__views__message__class="tests.serde.messages:PageView",
        serializers__registry__views__schema__registry__url=schema_registry.url,
        serializers__registry__views__auto__register__schemas="true",
    )
    deserializer = ProtobufDeserializer(PageView)
    out_context = SerializationContext(sink, MessageField.VALUE)

    def output() -> list[Any]:
        return [deserializer(message.value(), out_context) for message in read_all(bootstrap, sink, 1)]

    job = Running(SparkJobRunner(config, spark=spark))
    try:
        wait_until(lambda: len(output()) >= 30, 120, "30 records in the output")
    finally:
        result = job.stop()
    assert result.outcome == "stopped", result.error
    assert output() == views


def test_a_job_whose_output_schema_is_not_registered_fails_naming_subject_and_stream(
    bootstrap, schema_registry: SchemaRegistryServer, topic_name, tmp_path
):
    source, sink = setup(bootstrap, topic_name)
    produce_avro_v1(bootstrap, schema_registry.url, source, ["a"])
    config = avro_job(
        bootstrap,
        schema_registry.url,
        tmp_path,
        source,
        sink,
        serializers__registry__pageview__auto__register__schemas="false",  # the default, spelt out
        task__drop__serialization__errors="true",  # a refused schema is not a per-message error
    )
    result = Running(InProcessRunner(config)).wait()
    assert result.outcome == "failed"
    assert "SchemaRegistryRefusedError" in str(result.error)
    assert f"subject '{sink}-value'" in str(result.error) and f"stream 'kafka.{sink}'" in str(result.error)
    assert read_all(bootstrap, sink, 1) == []

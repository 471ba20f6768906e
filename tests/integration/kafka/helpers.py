"""Building blocks of the Kafka integration tests: config for a Kafka system, topics, reading and writing."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from millstream.config.settings import Settings
from millstream.coordinator.prepare import prepare

SYSTEM = "kafka"


def kafka_config(bootstrap: str, **extra: Any) -> Settings:
    """A config with one Kafka system named ``kafka``; ``a__b=1`` sets ``a.b=1``."""
    values: dict[str, Any] = {
        f"systems.{SYSTEM}.samza.factory": "kafka",
        f"systems.{SYSTEM}.bootstrap.servers": bootstrap,
    }
    values.update({key.replace("__", "."): str(value) for key, value in extra.items()})
    return Settings(values)


def job_config(bootstrap: str, data_dir: Any, inputs: str, output: str, **extra: Any) -> Settings:
    """A job reading ``kafka.<inputs>`` and writing ``kafka.<output>`` with checkpoints and metadata in Kafka."""
    values: dict[str, Any] = {
        "job.name": "kafka-test",
        "job.data.dir": str(data_dir),
        "task.class": "tests.integration.kafka.jobs:KafkaPassThrough",
        "task.inputs": f"{SYSTEM}.{inputs}",
        "task.commit.ms": "300",
        "task.checkpoint.factory": "kafka",
        "metadata.store.factory": "kafka",
        f"systems.{SYSTEM}.samza.factory": "kafka",
        f"systems.{SYSTEM}.bootstrap.servers": bootstrap,
        f"systems.{SYSTEM}.samza.offset.default": "oldest",
        f"systems.{SYSTEM}.samza.key.serde": "string",
        f"systems.{SYSTEM}.samza.msg.serde": "json",
        "test.output": output,
    }
    values.update({key.replace("__", "."): str(value) for key, value in extra.items()})
    return prepare(Settings(values))


def create_topic(bootstrap: str, topic: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if info is not None and info.error is None and all(p.leader >= 0 for p in info.partitions.values()):
            return
        time.sleep(0.05)
    raise AssertionError(f"topic {topic} has no leaders")


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None]],
    *,
    partition: int | None = None,
    timestamp: int | None = None,
    headers: Any = None,
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value in records:
        kwargs: dict[str, Any] = {}
        if partition is not None:
            kwargs["partition"] = partition
        if timestamp is not None:
            kwargs["timestamp"] = timestamp
        if headers is not None:
            kwargs["headers"] = headers
        producer.produce(topic, value, key, **kwargs)
    assert producer.flush(30) == 0


def read_all(bootstrap: str, topic: str, partitions: int, *, isolation: str = "read_committed") -> list[Any]:
    """Every message of ``topic`` up to its current end, in partition then offset order."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "tests", "enable.auto.commit": False, "isolation.level": isolation}
    )
    try:
        ends = {}
        for partition in range(partitions):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30, cached=False)
            ends[partition] = high
        del admin
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        messages: list[Any] = []
        positions = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + 60
        while any(positions[p] < ends[p] for p in positions) and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.2):
                if message.error() is None:
                    read_from, offset = message.partition(), message.offset()
                    assert read_from is not None and offset is not None  # set on every consumed message
                    messages.append(message)
                    positions[read_from] = offset + 1
            for tp in consumer.position([TopicPartition(topic, p) for p in range(partitions)]):
                if tp.offset >= 0:
                    positions[tp.partition] = max(positions[tp.partition], tp.offset)
        return sorted(messages, key=lambda m: (m.partition(), m.offset()))
    finally:
        consumer.close()


def produce_numbers(
    bootstrap: str, topic: str, partitions: int, per_partition: int, start: int = 0
) -> set[tuple[int, int]]:
    """Write ``per_partition`` JSON numbers with key ``k<partition>`` to every partition; returns the
    (partition, value) pairs written."""
    written: set[tuple[int, int]] = set()
    for partition in range(partitions):
        values = range(start, start + per_partition)
        produce(bootstrap, topic, [(b"k%d" % partition, b"%d" % v) for v in values], partition=partition)
        written.update((partition, v) for v in values)
    return written


class TopicTail:
    """Reads a topic's partitions from the beginning as they grow, decoding the pass-through output."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "tail", "enable.auto.commit": False, "log_level": 0}
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.values: list[dict[str, Any]] = []

    def poll(self, seconds: float = 0.2) -> list[dict[str, Any]]:
        import orjson

        for message in self.consumer.consume(10_000, seconds):
            if message.error() is None:
                value = message.value()
                assert value is not None  # the pass-through output has no tombstones
                self.values.append(orjson.loads(value))
        return self.values

    def origins(self) -> list[tuple[int, int]]:
        return [(value["p"], value["v"]) for value in self.values]

    def wait_for(self, expected: set[tuple[int, int]], timeout: float) -> set[tuple[int, int]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            seen = set(self.origins())
            if expected <= seen:
                return seen
        missing = expected - set(self.origins())
        raise AssertionError(
            f"{len(missing)} of {len(expected)} messages never reached the output, e.g. {sorted(missing)[:5]}"
        )

    def close(self) -> None:
        self.consumer.close()

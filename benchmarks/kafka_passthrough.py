"""Kafka → Kafka pass-through and Kafka → count per key: millstream vs. a raw confluent-kafka consumer.

    python -m benchmarks.kafka_passthrough [--messages 1000000] [--partitions 4] [--size 100] [--keys 1000]
                                           [--bootstrap host:port] [--no-spark]

Without ``--bootstrap`` a KRaft broker is started from the test harness's JARs (make kafka-jars).
Every figure comes from the same topic in the same run, so the ratios hold whatever the machine:
  raw consumer   confluent-kafka ``Consumer.consume`` over every partition, nothing done per message
  raw copy       confluent-kafka alone consuming and producing every message (a reference for pass-through)
  no-op job      millstream reading every message into a task that does nothing (1 container)
  count per key  millstream counting messages per key in a dict (1 container)
  pass-through   millstream copying every message to another topic (1 container, in-process): at-least-once
                 (the default: output through an idempotent producer), and exactly-once
                 (``task.processing.guarantee=exactly-once``: output and checkpoints in one transaction per commit,
                 every 100 ms)
  count, store   millstream counting per key in a RocksDB store with a Kafka changelog, sending each new count
                 to another topic (1 container, in-process): at-least-once and exactly-once (the changelog joins
                 the transaction, and each commit snapshots the store)
  spark          the pass-through through the Spark runner with 2 containers (2 Python workers)
Jobs keep their checkpoints and metadata in Kafka. Kafka never ends a stream, so each task counts
its partition's messages and the container shuts itself down when all of its tasks are done.
Per-container rate = the container's messages / the time from its first to its last message. CPU per message
is the benchmark process's user + system time over the job's run (start-up included) / its messages: on a loaded
machine the steadier figure to compare contenders by.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.tasks import BoundedTask, unfinished_tasks
from millstream import (
    IncomingMessageEnvelope,
    MessageCollector,
    OutgoingMessageEnvelope,
    SystemStream,
    TaskContext,
    TaskCoordinator,
)
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.coordinator.job_result import JobResult
from millstream.coordinator.prepare import prepare
from millstream.testing import InProcessRunner

SOURCE = "bench-in"
SINK = "bench-out"
RUN_ID = uuid.uuid4().hex[:8]
"""Job names are unique per invocation: a job must not resume from a previous invocation's checkpoints."""


class NoOp(BoundedTask):
    def process(self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator):
        self._count(coordinator)


class CountPerKey(BoundedTask):
    def init(self, context: TaskContext) -> None:
        super().init(context)
        self.counts: Counter[Any] = Counter()

    def process(self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator):
        self.counts[envelope.key] += 1
        self._count(coordinator)


class StoreCountPerKey(BoundedTask):
    """Counts per key in the ``counts`` store (8-byte big-endian counts, no serdes) and sends each new count."""

    OUTPUT = SystemStream("kafka", SINK)

    def init(self, context: TaskContext) -> None:
        super().init(context)
        self.store = context.get_store("counts")

    def process(self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator):
        previous = self.store.get(envelope.key)
        count = ((int.from_bytes(previous, "big") if previous else 0) + 1).to_bytes(8, "big")
        self.store.put(envelope.key, count)
        collector.send(OutgoingMessageEnvelope(self.OUTPUT, count, envelope.key))
        self._count(coordinator)


class BytesPassThrough(BoundedTask):
    OUTPUT = SystemStream("kafka", SINK)

    def process(self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator):
        collector.send(OutgoingMessageEnvelope(self.OUTPUT, envelope.message, envelope.key))
        self._count(coordinator)


def job_config(
    root: Path, bootstrap: str, task: str, containers: int, run: str, per_partition: int, **extra: Any
) -> Config:
    return prepare(
        Settings(
            {
                "job.name": f"bench-{run}-{RUN_ID}",
                "job.data.dir": str(root / "data"),
                "job.container.count": containers,
                "metadata.store.factory": "kafka",
                "task.checkpoint.factory": "kafka",
                "systems.kafka.samza.factory": "kafka",
                "systems.kafka.bootstrap.servers": bootstrap,
                "systems.kafka.samza.offset.default": "oldest",
                "task.class": f"benchmarks.kafka_passthrough:{task}",
                "task.inputs": f"kafka.{SOURCE}",
                "task.commit.ms": 10_000,
                "bench.messages.per.partition": per_partition,
                **extra,
            }
        )
    )


def recreate_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        admin.delete_topics([topic])[topic].result(60)
        while topic in admin.list_topics(timeout=30).topics:
            time.sleep(0.1)
    while True:
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
            break
        except Exception as error:  # deletion still in progress on the broker
            if "marked for deletion" not in str(error) and "already exists" not in str(error):
                raise
            time.sleep(0.2)
    while True:
        info = admin.list_topics(topic=topic, timeout=30).topics.get(topic)
        if info is not None and info.error is None and all(p.leader >= 0 for p in info.partitions.values()):
            return
        time.sleep(0.05)


def write_messages(bootstrap: str, partitions: int, messages: int, size: int, keys: int) -> float:
    """``messages`` values of ``size`` bytes with ``keys`` distinct keys, spread evenly over the partitions."""
    recreate_topic(bootstrap, SOURCE, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000})
    value = b"x" * size
    key_bytes = [f"key-{k}".encode() for k in range(keys)]
    started = time.perf_counter()
    for index in range(messages):
        while True:
            try:
                producer.produce(SOURCE, value, key_bytes[index % keys], index % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return messages / (time.perf_counter() - started)


def raw_consumer_rate(bootstrap: str, partitions: int, messages: int) -> float:
    """confluent-kafka alone: consume every message of the topic from offset 0; messages/s. Tuned as
    millstream's consumer is (``fetch.queue.backoff.ms=10``; librdkafka's 1 s default would make the
    broker-side prefetch, not the consumer, the limit)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-raw",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(SOURCE, p, 0) for p in range(partitions)])
    count = 0
    started: float | None = None
    while count < messages:
        batch = consumer.consume(10_000, 0.5)
        if batch and started is None:
            started = time.perf_counter()
        count += sum(1 for message in batch if message.error() is None)
    elapsed = time.perf_counter() - (started or time.perf_counter())
    consumer.close()
    return count / max(elapsed, 1e-9)


def raw_passthrough_rate(bootstrap: str, partitions: int, messages: int) -> float:
    """confluent-kafka alone, consume → produce every message to the sink topic with the producer settings
    millstream uses (idempotent, acks=all, flushed at the end): a reference for what copying costs."""
    recreate_topic(bootstrap, SINK, partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-raw",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "delivery.report.only.error": True,
        }
    )
    consumer.assign([TopicPartition(SOURCE, p, 0) for p in range(partitions)])
    count = 0
    started: float | None = None
    while count < messages:
        batch = consumer.consume(10_000, 0.5)
        if batch and started is None:
            started = time.perf_counter()
        for message in batch:
            if message.error() is None:
                while True:
                    try:
                        producer.produce(SINK, message.value(), message.key(), -1)
                        break
                    except BufferError:
                        producer.flush(0.01)
                count += 1
    producer.flush(120)
    elapsed = time.perf_counter() - (started or time.perf_counter())
    consumer.close()
    return count / max(elapsed, 1e-9)


def report(name: str, result: JobResult, wall: float, raw: float, cpu: float | None = None) -> None:
    assert result.outcome == "finished", result.error
    per_container = [c.messages / c.processing_seconds for c in result.containers if c.processing_seconds > 0]
    aggregate = result.messages / max(c.processing_seconds for c in result.containers)
    print(
        f"{name:<30}{aggregate:>12,.0f} msgs/s  {aggregate / raw:>6.0%} of raw consumer   per container: "
        + ", ".join(f"{rate:,.0f}" for rate in per_container)
        + f"   (wall {wall:.1f}s incl. start-up)"
        + (f"   {cpu / result.messages * 1e6:.2f} µs CPU/msg" if cpu is not None else ""),
        flush=True,
    )


def run_benchmarks(bootstrap: str, args: Any, root: Path) -> None:
    per_partition = args.messages // args.partitions
    messages = per_partition * args.partitions
    write = write_messages(bootstrap, args.partitions, messages, args.size, args.keys)
    print(
        f"{messages:,} messages of {args.size} B, {args.keys} keys, over {args.partitions} partitions "
        f"(written at {write:,.0f}/s)",
        flush=True,
    )
    raw = max(raw_consumer_rate(bootstrap, args.partitions, messages) for _ in range(2))
    print(f"{'raw consumer (confluent-kafka)':<30}{raw:>12,.0f} msgs/s  {1:>6.0%}", flush=True)
    copy = raw_passthrough_rate(bootstrap, args.partitions, messages)
    print(f"{'raw consume → produce':<30}{copy:>12,.0f} msgs/s  {copy / raw:>6.0%} of raw consumer", flush=True)
    exactly_once = {"task.processing.guarantee": "exactly-once", "task.commit.ms": 100}

    def store(run: int) -> dict[str, Any]:
        return {"stores.counts.factory": "rocksdb", "stores.counts.changelog": f"kafka.bench-changelog-{run}-{RUN_ID}"}

    runs: list[tuple[str, str, int, dict[str, Any]]] = [
        ("no-op job, 1 container", "NoOp", 1, {}),
        ("count per key, 1 container", "CountPerKey", 1, {}),
        ("pass-through, 1 container", "BytesPassThrough", 1, {}),
        ("pass-through, exactly-once", "BytesPassThrough", 1, exactly_once),
        ("count, store, 1 container", "StoreCountPerKey", 1, store(0)),
        ("count, store, exactly-once", "StoreCountPerKey", 1, {**store(1), **exactly_once}),
    ]
    for index, (name, task, containers, extra) in enumerate(runs):
        recreate_topic(bootstrap, SINK, args.partitions)
        unfinished_tasks.clear()
        config = job_config(root, bootstrap, task, containers, str(index), per_partition, **extra)
        started, cpu = time.perf_counter(), time.process_time()
        result = InProcessRunner(config).run()
        report(name, result, time.perf_counter() - started, raw, time.process_time() - cpu)
    if not args.no_spark:
        from millstream.spark.run.runner import SparkJobRunner

        recreate_topic(bootstrap, SINK, args.partitions)
        config = job_config(root, bootstrap, "BytesPassThrough", 2, "spark", per_partition)
        started = time.perf_counter()
        result = SparkJobRunner(config).run()
        report("pass-through, Spark, 2 ctrs", result, time.perf_counter() - started, raw)
    delete_job_topics(bootstrap)


def delete_job_topics(bootstrap: str) -> None:
    """Remove this invocation's checkpoint, coordinator and changelog topics from the cluster."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    prefixes = ("__millstream-", "bench-changelog-")
    topics = [t for t in admin.list_topics(timeout=30).topics if t.startswith(prefixes) and RUN_ID in t]
    if topics:
        for future in admin.delete_topics(topics).values():
            future.result(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--bootstrap", help="an existing broker (default: start one from the test harness)")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark runner measurement")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="millstream-kafka-bench-"))
    try:
        if args.bootstrap:
            run_benchmarks(args.bootstrap, args, root)
            return
        from tests.integration.kafka_broker import KafkaBroker

        with KafkaBroker(root / "broker", log_level="WARN") as broker:
            print(f"broker at {broker.bootstrap_servers}", flush=True)
            run_benchmarks(broker.bootstrap_servers, args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

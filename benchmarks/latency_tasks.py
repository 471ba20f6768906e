"""The latency benchmark's jobs (``benchmarks.latency``): millstream tasks (importable by Spark workers as
``benchmarks.latency_tasks:<Name>``) and the raw confluent-kafka loop, run as its own process:

    python -m benchmarks.latency_tasks raw --bootstrap host:port --input IN --output OUT --workload w1|w2 --partitions N
    python -m benchmarks.latency_tasks raw-log --path LOG_DIR --input IN --output OUT --workload w1|w2 --partitions N

Unlike ``benchmarks.tasks.BoundedTask``, nothing here ends by itself: the benchmark stops each contender with
SIGTERM once the output holds every record it sent. An input value is ``b"<seq>,<send ns>,<padding>"``;
W1 copies it as is, W2 sends ``b"<count>," + value`` (the count of the key so far, then the input value) so
the reader can check the count and still read the send time off the value.
"""

from __future__ import annotations

import argparse
import signal
from collections import Counter
from types import FrameType
from typing import Any

from millstream import (
    IncomingMessageEnvelope,
    InitableTask,
    MessageCollector,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStream,
    TaskContext,
    TaskCoordinator,
)
from millstream.config.settings import Settings


class PassThrough(StreamTask, InitableTask):
    """W1: every message to ``bench.output``, same key, bytes to bytes."""

    def init(self, context: TaskContext) -> None:
        self.output = SystemStream(
            str(context.config.get("bench.output.system", "kafka")), str(context.config["bench.output"])
        )

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        collector.send(OutgoingMessageEnvelope(self.output, envelope.message, envelope.key))


class CountPerKey(StreamTask, InitableTask):
    """W2: the count per key in the ``counts`` store (RocksDB with a Kafka changelog), sent per message as
    ``b"<count>," + input value``."""

    def init(self, context: TaskContext) -> None:
        self.output = SystemStream(
            str(context.config.get("bench.output.system", "kafka")), str(context.config["bench.output"])
        )
        self.store: Any = context.get_store("counts")

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        key = envelope.key
        previous = self.store.get(key)
        count = (int(previous) if previous else 0) + 1
        self.store.put(key, b"%d" % count)
        collector.send(OutgoingMessageEnvelope(self.output, b"%d," % count + envelope.message, key))


def raw_loop(args: argparse.Namespace) -> None:
    """confluent-kafka alone: ``read_committed`` consumer → idempotent producer (acks=all, as millstream's),
    librdkafka's defaults otherwise; W2 counts per key in a dict. Runs until SIGTERM."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    stop = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.name,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(args.input, p, 0) for p in range(args.partitions)])
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "delivery.report.only.error": True,
        }
    )
    counts: Counter[bytes] = Counter()
    count_per_key = args.workload == "w2"
    while not stop:
        # consume(n, t) waits the whole t unless n messages arrive: drain what is there, else wait for one.
        batch = consumer.consume(1000, 0) or consumer.consume(1, 0.1)
        for message in batch:
            if message.error() is not None:
                continue
            value = message.value() or b""
            key = message.key() or b""
            if count_per_key:
                counts[key] += 1
                value = b"%d," % counts[key] + value
            while True:
                try:
                    producer.produce(args.output, value, key)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.poll(0)
    if producer.flush(60) != 0:
        raise SystemExit(f"{args.output}: messages still unsent after 60 s")
    consumer.close()


def raw_log_loop(args: argparse.Namespace) -> None:
    """The embedded log alone (``benchmarks.latency_log``): its consumer → its producer, each batch flushed at once
    (what it polled is appended before the next poll); W2 counts per key in a dict. Runs until SIGTERM."""
    from millstream.embedded.log.factory import LogSystemFactory
    from millstream.model import SystemStreamPartition

    stop = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    config = Settings({"systems.log.path": args.path})
    factory = LogSystemFactory()
    consumer = factory.get_consumer("log", config)
    producer = factory.get_producer("log", config)
    ssps = {SystemStreamPartition("log", args.input, p) for p in range(args.partitions)}
    for ssp in ssps:
        consumer.register(ssp, "0")
    consumer.start()
    producer.start()
    output = SystemStream("log", args.output)
    counts: Counter[bytes] = Counter()
    count_per_key = args.workload == "w2"
    while not stop:
        polled = consumer.poll(ssps, 0.1)
        for ssp, envelopes in polled.items():
            for envelope in envelopes:
                if envelope.is_end_of_stream:
                    continue
                value, key = envelope.message or b"", envelope.key or b""
                if count_per_key:
                    counts[key] += 1
                    value = b"%d," % counts[key] + value
                producer.send("raw", OutgoingMessageEnvelope(output, value, key, partition=ssp.partition))
        if polled:
            producer.flush("raw")
    producer.flush("raw")
    producer.stop()
    consumer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="the raw consume → produce loops: confluent-kafka's, the log's")
    parser.add_argument("loop", choices=["raw", "raw-log"])
    parser.add_argument("--bootstrap")
    parser.add_argument("--path", help="raw-log: the embedded log's directory (systems.log.path)")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--workload", choices=["w1", "w2"], required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--name")
    args = parser.parse_args()
    if args.loop == "raw-log":
        raw_log_loop(args)
    else:
        raw_loop(args)


if __name__ == "__main__":
    main()

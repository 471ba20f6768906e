"""The peer benchmark's millstream tasks (importable by Spark workers as
``benchmarks.peers.millstream_tasks:<Name>``).

Each is a ``benchmarks.tasks.BoundedTask``, as ``benchmarks.kafka_passthrough``'s are: Kafka never ends a
stream, so the container shuts down once its tasks read their messages. The output stream is
``bench.output`` (a Kafka topic).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.tasks import BoundedTask
from millstream import (
    BatchStreamTask,
    IncomingMessageEnvelope,
    MessageCollector,
    OutgoingMessageEnvelope,
    SystemStream,
    TaskContext,
    TaskCoordinator,
)


class _BoundedTask(BoundedTask):
    def init(self, context: TaskContext) -> None:
        super().init(context)
        self.output = SystemStream("kafka", str(context.config["bench.output"]))


class PassThrough(_BoundedTask):
    """W1: every message to the output topic, same key, bytes to bytes."""

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        collector.send(OutgoingMessageEnvelope(self.output, envelope.message, envelope.key))
        self._count(coordinator)


class CountPerKey(_BoundedTask):
    """W2: the count per key in the ``counts`` store (RocksDB with a Kafka changelog), the new count sent
    per message as ASCII digits."""

    def init(self, context: TaskContext) -> None:
        super().init(context)
        self.store: Any = context.get_store("counts")

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        key = envelope.key
        previous = self.store.get(key)
        count = (int(previous) if previous else 0) + 1
        data = b"%d" % count
        self.store.put(key, data)
        collector.send(OutgoingMessageEnvelope(self.output, data, key))
        self._count(coordinator)


class PassThroughBatch(BatchStreamTask, _BoundedTask):
    """W1 with the batch API: each polled batch to the output topic in one ``send_batch``."""

    def process_batch(
        self, envelopes: Sequence[IncomingMessageEnvelope], collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        collector.send_batch(self.output, [e.message for e in envelopes], [e.key for e in envelopes])
        self._count(coordinator, len(envelopes))


class CountPerKeyBatch(BatchStreamTask, _BoundedTask):
    """W2 with the batch API: the counts of a batch updated in the store one by one, sent in one ``send_batch``."""

    def init(self, context: TaskContext) -> None:
        super().init(context)
        self.store: Any = context.get_store("counts")

    def process_batch(
        self, envelopes: Sequence[IncomingMessageEnvelope], collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        get, put = self.store.get, self.store.put
        keys = [e.key for e in envelopes]
        counts = []
        for key in keys:
            previous = get(key)
            data = b"%d" % ((int(previous) if previous else 0) + 1)
            put(key, data)
            counts.append(data)
        collector.send_batch(self.output, counts, keys)
        self._count(coordinator, len(envelopes))

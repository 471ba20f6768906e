"""The peer benchmark's millstream tasks (importable by Spark workers as
``benchmarks.peers.millstream_tasks:<Name>``).

Kafka never ends a stream, so each task reads ``bench.messages.per.partition`` messages of each of its
partitions and the last task of its container to finish shuts the container down, as
``benchmarks.kafka_passthrough`` does. The output stream is ``bench.output`` (a Kafka topic).
"""

from __future__ import annotations

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

_unfinished_tasks: set[str] = set()
"""Tasks of this process's container that have not read all their messages yet."""


class _BoundedTask(StreamTask, InitableTask):
    def init(self, context: TaskContext) -> None:
        per_partition = int(context.config["bench.messages.per.partition"])
        self.output = SystemStream("kafka", str(context.config["bench.output"]))
        self.task_name = str(context.task_name)
        self.left = per_partition * len(context.system_stream_partitions)
        _unfinished_tasks.add(self.task_name)

    def _count(self, coordinator: TaskCoordinator) -> None:
        self.left -= 1
        if self.left == 0:
            _unfinished_tasks.discard(self.task_name)
            if not _unfinished_tasks:
                coordinator.shutdown()


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

"""Tasks the benchmarks run (importable by Spark workers as ``benchmarks.tasks:<Name>``)."""

from __future__ import annotations

from millstream import (
    BatchStreamTask,
    InitableTask,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStream,
    TaskContext,
    TaskCoordinator,
)

OUTPUT = SystemStream("log", "bench-out")
unfinished_tasks: set[str] = set()
"""Tasks of this process's container(s) that have not read all their messages yet (``BoundedTask``)."""


class NoOp(StreamTask):
    """Reads and does nothing: the framework's cost per message on top of the consumer."""

    def process(self, envelope, collector, coordinator):
        pass


class BytesPassThrough(StreamTask):
    """Copies each message, bytes to bytes, to ``log.bench-out``."""

    def process(self, envelope, collector, coordinator):
        collector.send(OutgoingMessageEnvelope(OUTPUT, envelope.message, envelope.key))


class BytesPassThroughBatch(BatchStreamTask):
    """``BytesPassThrough`` with the batch API: each polled batch in one ``send_batch``."""

    def process_batch(self, envelopes, collector, coordinator):
        collector.send_batch(OUTPUT, [e.message for e in envelopes], [e.key for e in envelopes])


class BoundedTask(StreamTask, InitableTask):
    """Reads ``bench.messages.per.partition`` messages of each of its partitions; the last task of the
    container to finish shuts the container down (every task's ``init`` runs before any ``process``).
    Kafka never ends a stream: this is how a Kafka benchmark's job ends."""

    def init(self, context: TaskContext) -> None:
        per_partition = int(context.config["bench.messages.per.partition"])
        self.task_name = str(context.task_name)
        self.left = per_partition * len(context.system_stream_partitions)
        unfinished_tasks.add(self.task_name)

    def _count(self, coordinator: TaskCoordinator, messages: int = 1) -> None:
        self.left -= messages
        if self.left <= 0:
            unfinished_tasks.discard(self.task_name)
            if not unfinished_tasks:
                coordinator.shutdown()

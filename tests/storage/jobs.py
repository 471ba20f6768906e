"""Stateful tasks the storage tests run, importable by Spark workers as ``tests.storage.jobs:<Name>``."""

from __future__ import annotations

import time
from typing import Any

from millstream import (
    EndOfStreamListenerTask,
    IncomingMessageEnvelope,
    InitableTask,
    MessageCollector,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStream,
    TaskContext,
    TaskCoordinator,
)

OUTPUT = SystemStream("log", "out")
STORE = "counts"


class CountPerKey(StreamTask, InitableTask):
    """Counts messages per key in the ``counts`` store and emits each new count with the input's origin.

    ``test.delay.seconds`` slows it down so a test can act in the middle of a run.
    """

    def init(self, context: TaskContext) -> None:
        self.store = context.get_store(STORE)
        self.delay = float(context.config.get("test.delay.seconds", "0"))

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        if self.delay:
            time.sleep(self.delay)
        count = (self.store.get(envelope.key) or 0) + 1
        self.store.put(envelope.key, count)
        origin: dict[str, Any] = {"p": envelope.ssp.partition, "o": envelope.offset, "v": envelope.message}
        collector.send(OutgoingMessageEnvelope(OUTPUT, {**origin, "count": count}, key=envelope.key))


class CountPerKeyReportingAtEnd(CountPerKey, EndOfStreamListenerTask):
    """Also sends its whole store to ``log.out`` at end-of-stream: ``{"task": name, "store": {key: count}}``."""

    def init(self, context: TaskContext) -> None:
        super().init(context)
        self.task_name = str(context.task_name)

    def on_end_of_stream(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        collector.send(OutgoingMessageEnvelope(OUTPUT, {"task": self.task_name, "store": dict(self.store.all())}))

"""Tasks of the exactly-once tests on the embedded log."""

from __future__ import annotations

import time

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


class CountPerKey(StreamTask, InitableTask):
    """Counts messages per key in the store ``counts`` and sends ``{"p", "v", "key", "count"}`` to ``log.out``,
    at most one message per ``test.delay.seconds``: state a restart must restore exactly."""

    def init(self, context: TaskContext) -> None:
        self.store = context.get_store("counts")
        self.output = SystemStream("log", "out")
        self.delay = float(context.config.get("test.delay.seconds", "0"))

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        if self.delay:
            time.sleep(self.delay)
        count = (self.store.get(envelope.key) or 0) + 1
        self.store.put(envelope.key, count)
        record = {"p": envelope.ssp.partition, "v": envelope.message, "key": envelope.key, "count": count}
        collector.send(OutgoingMessageEnvelope(self.output, record, key=envelope.key))

"""Copy every click to ``click-audit`` with the partition and offset it was read from.

The output is what makes a rewind visible: a record read twice appears twice, with the same offset.
"""

from __future__ import annotations

from millstream import (
    IncomingMessageEnvelope,
    MessageCollector,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStream,
    TaskCoordinator,
)

OUTPUT = SystemStream("log", "click-audit")


class ClickAudit(StreamTask):
    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        partition = envelope.system_stream_partition.partition
        audit = {"partition": partition, "offset": envelope.offset, "click": envelope.message}
        collector.send(OutgoingMessageEnvelope(OUTPUT, audit, key=envelope.key))

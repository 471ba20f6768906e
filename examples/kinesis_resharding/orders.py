"""Copy every order to ``log.orders-seen`` with the shard it came from, in the order it was processed.

The output has one partition, so it is one global processing order: the place to check that every
record of a parent shard came before any record of its children, and each key's records in order.
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
from millstream.connectors.kinesis import SHARD_ID_HEADER

OUTPUT = SystemStream("log", "orders-seen")


class OrderAudit(StreamTask):
    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        shard = (envelope.headers or {})[SHARD_ID_HEADER].decode()
        seen = {"customer": envelope.key, "n": envelope.message["n"], "shard": shard}
        collector.send(OutgoingMessageEnvelope(OUTPUT, seen, key=envelope.key, partition=0))

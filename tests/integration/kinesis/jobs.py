"""Tasks the Kinesis job tests run, importable by Spark workers as ``tests.integration.kinesis.jobs:<Name>``."""

from __future__ import annotations

import time

from millstream import InitableTask, OutgoingMessageEnvelope, StreamTask, SystemStream, TaskContext
from millstream.connectors.kinesis.consumer import SEQUENCE_NUMBER_HEADER, SHARD_ID_HEADER

OUTPUT = SystemStream("log", "out")


class RecordOrigin(StreamTask, InitableTask):
    """Copies every record to ``log.out`` (one partition: one global order) with where it came from.

    ``test.delay.seconds`` slows processing down so that a test can reshard or kill in the middle.
    """

    def init(self, context: TaskContext) -> None:
        self.delay = float(context.config.get("test.delay.seconds", "0"))
        self.task = str(context.task_name)

    def process(self, envelope, collector, coordinator):
        if self.delay:
            time.sleep(self.delay)
        headers = envelope.headers or {}
        collector.send(
            OutgoingMessageEnvelope(
                OUTPUT,
                {
                    "key": envelope.key,
                    "n": envelope.message["n"],
                    "shard": headers[SHARD_ID_HEADER].decode(),
                    "seq": headers[SEQUENCE_NUMBER_HEADER].decode(),
                    "slot": envelope.ssp.partition,
                    "offset": envelope.offset,
                    "task": self.task,
                },
                key="all",
                partition=0,
            )
        )

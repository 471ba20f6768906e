"""Tasks the benchmarks run (importable by Spark workers as ``benchmarks.tasks:<Name>``)."""

from __future__ import annotations

from millstream import OutgoingMessageEnvelope, StreamTask, SystemStream

OUTPUT = SystemStream("log", "bench-out")


class NoOp(StreamTask):
    """Reads and does nothing: the framework's cost per message on top of the consumer."""

    def process(self, envelope, collector, coordinator):
        pass


class BytesPassThrough(StreamTask):
    """Copies each message, bytes to bytes, to ``log.bench-out``."""

    def process(self, envelope, collector, coordinator):
        collector.send(OutgoingMessageEnvelope(OUTPUT, envelope.message, envelope.key))

"""Stateful tasks the state benchmarks run (importable by Spark workers as ``benchmarks.state_tasks:<Name>``)."""

from __future__ import annotations

from typing import Any

from millstream import InitableTask, OutgoingMessageEnvelope, StreamTask, SystemStream

OUTPUT = SystemStream("log", "bench-out")


class BytesCountPerKey(StreamTask, InitableTask):
    """Counts messages per key in the ``counts`` store (8-byte big-endian counts, no serdes) and sends
    each new count to ``log.bench-out``: a pass-through plus a store read and write per message."""

    def init(self, context: Any) -> None:
        self.store = context.get_store("counts")

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        key = envelope.key
        previous = self.store.get(key)
        count = (int.from_bytes(previous, "big") if previous else 0) + 1
        data = count.to_bytes(8, "big")
        self.store.put(key, data)
        collector.send(OutgoingMessageEnvelope(OUTPUT, data, key))

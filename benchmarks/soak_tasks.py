"""The task the soak harness runs (importable by Spark workers as ``benchmarks.soak_tasks:CountPerKey``)."""

from __future__ import annotations

import time
from typing import Any

from millstream import EndOfStreamListenerTask, InitableTask, OutgoingMessageEnvelope, StreamTask, SystemStream

OUTPUT = SystemStream("log", "soak-out")
STORE = "counts"


class CountPerKey(StreamTask, InitableTask, EndOfStreamListenerTask):
    """Counts messages per key in the ``counts`` store, sends each new count with the input it follows,
    and at end-of-stream sends its whole store, so the harness can check every count and the final state.

    ``soak.delay.ms`` per message stretches the run so there is time to kill it."""

    def init(self, context: Any) -> None:
        system, _, stream = context.config.get("soak.output", f"{OUTPUT.system}.{OUTPUT.stream}").partition(".")
        self.output = SystemStream(system, stream)
        self.store = context.get_store(STORE)
        self.task = str(context.task_name)
        self.delay = float(context.config.get("soak.delay.ms", "0")) / 1000

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        if self.delay:
            time.sleep(self.delay)
        count = (self.store.get(envelope.key) or 0) + 1
        self.store.put(envelope.key, count)
        record = {"p": envelope.ssp.partition, "v": envelope.message, "key": envelope.key, "count": count}
        collector.send(OutgoingMessageEnvelope(self.output, record, key=envelope.key))

    def on_end_of_stream(self, collector: Any, coordinator: Any) -> None:
        collector.send(OutgoingMessageEnvelope(self.output, {"task": self.task, "store": dict(self.store.all())}))

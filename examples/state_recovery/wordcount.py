"""Count words in a RocksDB store, and report the whole store when the input ends.

The count lives only in the store: after a crash the container is started again, the store is restored
to the last checkpoint and the input is read again from that checkpoint's offsets, so every word is
counted exactly once whatever moment the crash hit.
"""

from __future__ import annotations

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

OUTPUT = SystemStream("log", "word-counts")


class WordCount(StreamTask, InitableTask, EndOfStreamListenerTask):
    def init(self, context: TaskContext) -> None:
        self.counts = context.get_store("counts")
        self.task_name = str(context.task_name)

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        word = envelope.message["word"]
        self.counts.put(word, (self.counts.get(word) or 0) + 1)

    def on_end_of_stream(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        report = {"task": self.task_name, "counts": dict(self.counts.all())}
        collector.send(OutgoingMessageEnvelope(OUTPUT, report, key=self.task_name))

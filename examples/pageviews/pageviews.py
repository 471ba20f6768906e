"""Count page views per page with the low-level API.

Each task owns one partition of ``page-views`` (events keyed by page), counts views per page in
memory, and when its input ends emits one ``{"page", "views"}`` record per page to
``page-view-counts``, keyed by page.
"""

from __future__ import annotations

from collections import Counter

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

OUTPUT = SystemStream("log", "page-view-counts")


class PageViewCounter(StreamTask, InitableTask, EndOfStreamListenerTask):
    def init(self, context: TaskContext) -> None:
        self.counts: Counter[str] = Counter()

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        self.counts[envelope.message["page"]] += 1

    def on_end_of_stream(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        for page, views in sorted(self.counts.items()):
            collector.send(OutgoingMessageEnvelope(OUTPUT, {"page": page, "views": views}, key=page))

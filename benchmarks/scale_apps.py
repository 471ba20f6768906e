"""The application of ``benchmarks/scale.py``'s control fan-out curve: source → partition_by(user) →
1 s tumbling count → sink, recording when the sources processed their last message, when the downstream
tasks read their last user record and when each sink task saw end-of-stream (in-process runs share this
module, so the records do too)."""

from __future__ import annotations

import time
from typing import Any

from millstream.api.application import InputDescriptor, StreamApplication, StreamApplicationDescriptor
from millstream.api.windows import Count, TumblingWindow

LAST_SOURCE: dict[str, float] = {}
"""Run id -> wall clock (s) of the last message a source task processed."""
FIRST_SOURCE: dict[str, float] = {}
"""Run id -> wall clock (s) of the first message a source task processed: from then on event time moves."""
SINK_ENDS: dict[str, list[float]] = {}
"""Run id -> wall clock (s) at which each sink task saw end-of-stream: after its window operator fired the last
windows (end-of-stream is a last watermark, then passed on), before the task's final commit."""
LAST_READ: dict[str, float] = {}
"""Run id -> wall clock (s) of the last user record a downstream task read from the intermediate stream."""


class NoteSource:
    def __init__(self, run: str, into: dict[str, float], first: dict[str, float] | None = None) -> None:
        self.run = run
        self.into = into
        self.first = first

    def __call__(self, message: Any) -> Any:
        now = self.into[self.run] = time.time()
        if self.first is not None:
            self.first.setdefault(self.run, now)
        return message


class NoteEnd:
    def __init__(self, run: str) -> None:
        self.run = run

    def __call__(self, message: Any, collector: Any, coordinator: Any) -> None:
        pass

    def on_end_of_stream(self) -> None:
        SINK_ENDS.setdefault(self.run, []).append(time.time())


class WindowedCount(StreamApplication):
    def describe(self, app: StreamApplicationDescriptor) -> None:
        run = app.config.get("bench.run", "run")
        (
            app.input(InputDescriptor("log.scale-in", msg_serde="json", timestamp=lambda m: m["ts"]))
            .map(NoteSource(run, LAST_SOURCE, FIRST_SOURCE))
            .partition_by(lambda m: m["user"], name="by-user")
            .map(NoteSource(run, LAST_READ))
            .window(TumblingWindow(1000), key=lambda kv: kv.key, aggregate=Count(), name="per-second")
            .sink(NoteEnd(run))
        )

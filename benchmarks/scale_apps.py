"""The application of ``benchmarks/scale.py``'s control fan-out curve: source → partition_by(user) →
1 s tumbling count → sink, recording when the sources processed their last message, when the downstream
tasks read their last user record and when each sink task saw end-of-stream (in-process runs share this
module, so the records do too; through Spark each Python worker writes its own to ``bench.notes.dir``, read back by
``read_notes``)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
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
    def __init__(self, run: str, notes_dir: str | None = None) -> None:
        self.run = run
        self.notes_dir = notes_dir

    def __call__(self, message: Any, collector: Any, coordinator: Any) -> None:
        pass

    def on_end_of_stream(self) -> None:
        SINK_ENDS.setdefault(self.run, []).append(time.time())
        if self.notes_dir is not None:
            write_notes(self.run, Path(self.notes_dir))


def write_notes(run: str, notes_dir: Path) -> None:
    """This process's records of ``run`` into ``notes_dir``, one file per process, rewritten at each of its sink
    tasks' end-of-stream: by its last one every task of the process read its last record, and every source task
    of the job processed its last message (end-of-stream reaches a sink only after every producer ended)."""
    notes = {
        "first_source": FIRST_SOURCE.get(run),
        "last_source": LAST_SOURCE.get(run),
        "last_read": LAST_READ.get(run),
        "sink_ends": SINK_ENDS.get(run, []),
    }
    notes_dir.mkdir(parents=True, exist_ok=True)
    partial = notes_dir / f".{os.getpid()}-{threading.get_ident()}.json"
    partial.write_text(json.dumps(notes))
    partial.replace(notes_dir / f"{os.getpid()}.json")


def read_notes(run: str, notes_dir: Path) -> None:
    """Merge what every process wrote (``write_notes``) into this process's records of ``run``."""
    for path in sorted(notes_dir.glob("[0-9]*.json")):
        notes = json.loads(path.read_text())
        if notes["first_source"] is not None:
            FIRST_SOURCE[run] = min(FIRST_SOURCE.get(run, notes["first_source"]), notes["first_source"])
        for key, into in (("last_source", LAST_SOURCE), ("last_read", LAST_READ)):
            if notes[key] is not None:
                into[run] = max(into.get(run, notes[key]), notes[key])
        SINK_ENDS.setdefault(run, []).extend(notes["sink_ends"])


class WindowedCount(StreamApplication):
    def describe(self, app: StreamApplicationDescriptor) -> None:
        run = app.config.get("bench.run", "run")
        notes_dir = app.config.get("bench.notes.dir")
        (
            app.input(InputDescriptor("log.scale-in", msg_serde="json", timestamp=lambda m: m["ts"]))
            .map(NoteSource(run, LAST_SOURCE, FIRST_SOURCE))
            .partition_by(lambda m: m["user"], name="by-user")
            .map(NoteSource(run, LAST_READ))
            .window(TumblingWindow(1000), key=lambda kv: kv.key, aggregate=Count(), name="per-second")
            .sink(NoteEnd(run, notes_dir))
        )

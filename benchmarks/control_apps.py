"""Applications of ``benchmarks/control_overhead.py``: one or two ``partition_by`` hops into a sink that
records when each watermark arrived (in-process runs share this module, so the records do too)."""

from __future__ import annotations

import time
from typing import Any

from millstream.api.application import InputDescriptor, StreamApplication, StreamApplicationDescriptor
from millstream.control.messages import MAX_WATERMARK

ARRIVALS: dict[str, list[tuple[float, int]]] = {}
"""Run id -> (wall-clock ms at the sink, watermark) for every watermark a sink saw."""


class WatermarkArrivals:
    def __init__(self, run: str) -> None:
        self.run = run
        self.arrivals = ARRIVALS.setdefault(run, [])

    def __call__(self, message: Any, collector: Any, coordinator: Any) -> None:
        pass

    def on_watermark(self, watermark: int) -> None:
        if watermark < MAX_WATERMARK:
            self.arrivals.append((time.time() * 1000, watermark))


def _source(app: StreamApplicationDescriptor) -> Any:
    return app.input(InputDescriptor("log.bench-in", msg_serde="json", timestamp=lambda m: m["ts"]))


class OneHop(StreamApplication):
    def describe(self, app: StreamApplicationDescriptor) -> None:
        run = app.config.get("bench.run", "run")
        _source(app).partition_by(lambda m: m["user"], name="by-user").sink(WatermarkArrivals(run))


class TwoHops(StreamApplication):
    def describe(self, app: StreamApplicationDescriptor) -> None:
        run = app.config.get("bench.run", "run")
        (
            _source(app)
            .partition_by(lambda m: m["user"], name="by-user")
            .map(lambda kv: kv.value)
            .partition_by(lambda m: m["n"] % 7, name="by-residue")
            .sink(WatermarkArrivals(run))
        )

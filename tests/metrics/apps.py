"""A high-level job that produces every series the Grafana dashboard charts, importable by Spark workers
as ``tests.metrics.apps:CountingWindows``: event time (watermarks per input and operator), a window, and
two stores, ``counts`` backed by a changelog and ``totals`` by the blob store (restore progress of both
kinds; ``totals`` is downloaded at every container start)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from millstream.api.application import OutputDescriptor, StreamApplication, StreamApplicationDescriptor
from millstream.api.task import TaskContext
from millstream.api.windows import Count, TumblingWindow
from millstream.config.settings import Settings
from tests.api.apps import WINDOW_MS, PanesAndWatermarks, Slow, app_config, source


class CountInStores:
    """Counts messages per user in ``counts`` and in all in ``totals``; passes each message on."""

    def init(self, context: TaskContext) -> None:
        self.counts = context.get_store("counts")
        self.totals = context.get_store("totals")

    def __call__(self, message: dict[str, Any]) -> dict[str, Any]:
        user = message["user"]
        self.counts.put(user, (self.counts.get(user) or 0) + 1)
        self.totals.put("all", (self.totals.get("all") or 0) + 1)
        return message


class CountingWindows(StreamApplication):
    def describe(self, app: StreamApplicationDescriptor) -> None:
        (
            source(app)
            .map(Slow(app.config))
            .map(CountInStores())
            .window(TumblingWindow(WINDOW_MS), key=lambda m: m["user"], aggregate=Count(), name="per-10s")
            .map(PanesAndWatermarks())
            .send_to(OutputDescriptor("log.out", msg_serde="json"))
        )


def counting_windows_config(data_dir: Path, **extra: Any) -> Settings:
    stores: dict[str, Any] = {}
    for store in ("counts", "totals"):
        stores.update(
            {f"stores__{store}__factory": "rocksdb", f"stores__{store}__key__serde": "string"},
            **{f"stores__{store}__msg__serde": "json"},
        )
    stores.update(
        stores__counts__changelog="log.counts-changelog",
        stores__totals__backup__factories="blobstore",
        stores__totals__clean__on__container__start="true",
        task__checkpoint__read__versions="2,1",
    )
    return app_config(data_dir, "tests.metrics.apps:CountingWindows", **{**stores, **extra})

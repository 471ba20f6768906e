"""Applications the high-level API tests run, importable by Spark workers as ``tests.api.apps:<Name>``.

Messages are ``{"user": "u3", "n": 17, "ts": 17000}`` on ``log.in`` (string keys, JSON values).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from millstream.api.application import InputDescriptor, OutputDescriptor, StreamApplication, StreamApplicationDescriptor
from millstream.api.task import TaskContext
from millstream.api.windows import Count, TumblingWindow, WindowPane
from millstream.config import Config
from millstream.control.messages import MAX_WATERMARK
from millstream.coordinator.prepare import prepare

WINDOW_MS = 10_000


def source(app: StreamApplicationDescriptor) -> Any:
    return app.input(InputDescriptor("log.in", key_serde="string", msg_serde="json", timestamp=lambda m: m["ts"]))


class RepartitionPassThrough(StreamApplication):
    """``in`` → partition_by(user) → ``out``: every message through one intermediate stream."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        (
            source(app)
            .map(Slow(app.config))
            .partition_by(lambda m: m["user"], name="by-user")
            .map(lambda kv: kv.value)
            .send_to(OutputDescriptor("log.out", msg_serde="json"))
        )


class TwoHops(StreamApplication):
    """Two repartitionings in a row: by user, then by ``n % 3``."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        (
            source(app)
            .partition_by(lambda m: m["user"], name="by-user")
            .map(lambda kv: kv.value)
            .partition_by(lambda m: m["n"] % 3, name="by-residue")
            .map(lambda kv: kv.value)
            .send_to(OutputDescriptor("log.out", msg_serde="json"))
        )


class WindowedCount(StreamApplication):
    """Counts per user per 10 s of event time across a repartitioning by user. The output interleaves
    panes with the watermarks the window passed on (``{"task", "watermark"}``), so a test can check each
    pane came out exactly when the watermark reached its end."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        (
            source(app)
            .map(Slow(app.config))
            .partition_by(lambda m: m["user"], name="by-user")
            .window(TumblingWindow(WINDOW_MS), key=lambda kv: kv.key, aggregate=Count(), name="per-10s")
            .map(PanesAndWatermarks())
            .send_to(OutputDescriptor("log.out", msg_serde="json"))
        )


class SourceWindowedCount(StreamApplication):
    """Counts per partition and user per 10 s of event time, windowed right at the source (one stage, no
    intermediate stream): a restart replays only the task's own input, so its windows after a crash must
    equal a fault-free run's exactly. Pane keys are ``<partition>/<user>``."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        (
            source(app)
            .map(Slow(app.config))
            .window(
                TumblingWindow(WINDOW_MS),
                key=lambda m: f"{m['n'] // 1000}/{m['user']}",
                aggregate=Count(),
                name="per-partition-10s",
            )
            .map(PanesAndWatermarks())
            .send_to(OutputDescriptor("log.out", msg_serde="json"))
        )


class PanesAndWatermarks:
    """Panes as JSON, and a record of every watermark the window passed on, tagged with the task."""

    def init(self, context: TaskContext) -> None:
        self.task = str(context.task_name)

    def __call__(self, pane: WindowPane) -> dict[str, Any]:
        return {"task": self.task, "user": pane.key, "start": pane.start, "end": pane.end, "count": pane.value}

    def on_watermark(self, watermark: int) -> list[dict[str, Any]]:
        return [{"task": self.task, "watermark": watermark}] if watermark < MAX_WATERMARK else []


class Slow:
    """Sleeps ``test.delay.seconds`` per message in the task named by ``test.slow.task`` (all when unset),
    so a test can act while a job runs; and, given ``test.progress.dir``, touches a file per task there."""

    def __init__(self, config: Config) -> None:
        self.delay = float(config.get("test.delay.seconds", "0"))
        self.slow_task = config.get("test.slow.task")
        self.progress = config.get("test.progress.dir")

    def init(self, context: TaskContext) -> None:
        self.task = str(context.task_name)
        if self.slow_task is not None and self.slow_task != self.task:
            self.delay = 0.0

    def __call__(self, message: Any) -> Any:
        if self.delay:
            time.sleep(self.delay)
        return message

    def on_end_of_stream(self) -> None:
        if self.progress:
            Path(self.progress, self.task.replace(" ", "-")).touch()


def app_config(data_dir: Path, app: str, **extra: Any) -> Config:
    values = {
        "job.name": "test",
        "job.data.dir": str(data_dir),
        "app.class": app,
        "task.commit.ms": "1000",
        "systems.log.samza.offset.default": "oldest",
        "systems.log.samza.key.serde": "string",
        "systems.log.samza.msg.serde": "json",
    }
    values.update({key.replace("__", "."): str(value) for key, value in extra.items()})
    return prepare(Config(values))


def messages(partition: int, count: int, users: int = 5, start: int = 0) -> list[tuple[str, dict[str, Any]]]:
    """``count`` messages of one partition, event time one second apart from ``start`` seconds."""
    return [
        (f"k{partition}", {"user": f"u{(i + partition) % users}", "n": 1000 * partition + i, "ts": (start + i) * 1000})
        for i in range(count)
    ]


def reference_counts(by_partition: dict[int, list[tuple[str, dict[str, Any]]]]) -> dict[tuple[str, int], int]:
    counts: dict[tuple[str, int], int] = {}
    for pairs in by_partition.values():
        for _, message in pairs:
            window = (message["user"], message["ts"] - message["ts"] % WINDOW_MS)
            counts[window] = counts.get(window, 0) + 1
    return counts


def reference_counts_per_partition(
    by_partition: dict[int, list[tuple[str, dict[str, Any]]]],
) -> dict[tuple[str, int], int]:
    """``SourceWindowedCount``'s panes computed in plain Python: ``(partition/user, start) -> count``."""
    counts: dict[tuple[str, int], int] = {}
    for partition, pairs in by_partition.items():
        for _, message in pairs:
            window = (f"{partition}/{message['user']}", message["ts"] - message["ts"] % WINDOW_MS)
            counts[window] = counts.get(window, 0) + 1
    return counts

"""The snapshot loop and its reporters: a failing reporter never stops the container."""

from __future__ import annotations

import logging

import pytest

from millstream.contracts.metrics import Registry
from millstream.contracts.metrics_snapshot import ContainerSnapshot
from millstream.metrics.reporters import LogReporter, SnapshotHeader, SnapshotLoop
from tests.helpers import wait_until


class Recording:
    def __init__(self) -> None:
        self.snapshots: list[ContainerSnapshot] = []

    def report(self, snapshot: ContainerSnapshot) -> None:
        self.snapshots.append(snapshot)


class Failing:
    def report(self, snapshot: ContainerSnapshot) -> None:
        raise OSError("store unreachable")


def test_the_loop_reports_every_interval_and_a_last_snapshot_when_stopped(caplog) -> None:
    registry = Registry({"container": "3"})
    registry.counter("processed").inc(5)
    recording = Recording()
    loop = SnapshotLoop(registry, SnapshotHeader("3", 2, 4), [Failing(), recording], interval=0.01)
    loop.start()
    wait_until(lambda: len(recording.snapshots) >= 2, 10, "two snapshots")
    loop.stop("finished")

    last = recording.snapshots[-1]
    assert (last.container_id, last.generation, last.attempt, last.state) == ("3", 2, 4, "finished")
    assert [s.value for s in last.samples if s.name == "processed"] == [5]
    assert "metrics reporter Failing failed: store unreachable" in caplog.text


def test_a_failing_refresh_skips_that_snapshot_only(caplog) -> None:
    registry = Registry()

    def unreachable() -> None:
        raise OSError("system unreachable")

    registry.before_snapshot(unreachable)
    recording = Recording()
    loop = SnapshotLoop(registry, SnapshotHeader("0", 1, 1), [recording], interval=60)
    loop.report_once()
    assert recording.snapshots == [] and "metrics snapshot of container 0 failed" in caplog.text


def test_the_log_reporter_writes_one_summary_line(caplog: pytest.LogCaptureFixture) -> None:
    registry = Registry({"container": "0"})
    registry.counter("processed", partition="0").inc(40)
    registry.counter("processed", partition="1").inc(2)
    registry.gauge("lag", partition="0").set(7)
    registry.derived("commits", "counter", lambda: 3)
    caplog.set_level(logging.INFO)

    LogReporter().report(ContainerSnapshot("0", 1, 2, 0, "running", registry.snapshot()))

    assert caplog.messages == [
        "metrics: container 0 (generation 1, attempt 2) processed=42 lag=7 commits=3 dead-lettered=0"
    ]

"""A store's restore progress: the gauges it keeps, its duration, and the line it logs while it runs."""

from __future__ import annotations

import logging

import pytest

from millstream.contracts.metrics import NOOP_METRICS, Registry
from millstream.storage.restore_progress import RestoreProgress, human_bytes
from millstream.testing import InProcessRunner
from tests.helpers import create_stream, fill, seal
from tests.storage.harness import TASK, restored_contents, state_config


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _values(registry: Registry) -> dict[str, float]:
    return {sample.name: sample.value for sample in registry.snapshot() if dict(sample.labels)["store"] == "counts"}


def test_a_download_keeps_bytes_done_of_expected_and_the_rate_per_task_and_store() -> None:
    clock = Clock()
    registry = Registry({"container": "0"})
    progress = RestoreProgress(registry, "Partition 3", "counts", bytes_expected=4_000_000_000, clock=clock)
    clock.now += 10
    progress.advance(size=1_200_000_000)

    values = _values(registry)
    assert values["store_restored_bytes"] == 1_200_000_000
    assert values["store_restore_expected_bytes"] == 4_000_000_000
    assert values["store_restore_rate_bytes_per_second"] == 120_000_000
    assert "store_restore_expected_records" not in values
    assert {dict(s.labels)["task"] for s in registry.snapshot()} == {"Partition 3"}


def test_a_replay_counts_records_of_expected_and_finishing_records_its_duration() -> None:
    clock = Clock()
    registry = Registry()
    progress = RestoreProgress(registry, "Partition 0", "counts", records_expected=400, clock=clock)
    progress.advance(100, 1000)
    progress.advance(300, 3000)
    clock.now += 2

    assert progress.finish() == 2
    values = _values(registry)
    assert (values["store_restored_records"], values["store_restore_expected_records"]) == (400, 400)
    assert values["store_restored_bytes"] == 4000
    duration = next(s for s in registry.snapshot() if s.name == "store_restore_duration")
    assert (duration.count, duration.value) == (1, 2)


def test_a_running_restore_logs_its_progress_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    progress = RestoreProgress(
        NOOP_METRICS, "Partition 3", "counts", bytes_expected=4_000_000_000, clock=clock, log_interval=10
    )
    with caplog.at_level(logging.INFO, logger="millstream.storage.restore_progress"):
        clock.now += 5
        progress.advance(size=400_000_000)  # not due yet
        clock.now += 9.1
        progress.advance(size=800_000_000)  # 14.1 s: due
        clock.now += 1
        progress.advance(size=100)  # logged 1 s ago

    assert [record.getMessage() for record in caplog.records] == [
        "restoring store counts of task Partition 3: 1.2 GB / 4.0 GB, 85.1 MB/s"
    ]


def test_without_a_known_size_the_line_counts_records() -> None:
    clock = Clock()
    progress = RestoreProgress(NOOP_METRICS, "Partition 1", "counts", records_expected=4000, clock=clock)
    clock.now += 1
    progress.advance(1200, 1_100_000)
    assert progress.describe() == "1,200 / 4,000 records, 1.1 MB, 1.1 MB/s"


@pytest.mark.parametrize(
    ("amount", "text"), [(0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (85_000_000, "85.0 MB"), (4e15, "4.0 PB")]
)
def test_sizes_read_in_decimal_units(amount: float, text: str) -> None:
    assert human_bytes(amount) == text


@pytest.mark.parametrize("backend", ["changelog", "blobstore"])
def test_a_restore_from_either_backend_reports_what_it_restored(tmp_path, backend: str) -> None:
    config = state_config(tmp_path, backend, stores__counts__object__cache__size=0)  # a record per update
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    fill(config, "in", 1, 30)
    seal(config, "in")
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error

    registry = Registry({"container": "0"})
    restored = restored_contents(config, TASK, tmp_path / "new-host", metrics=registry)

    assert sum(restored.values()) == 30
    values = _values(registry)
    duration = next(s for s in registry.snapshot() if s.name == "store_restore_duration")
    assert duration.count == 1 and dict(duration.labels)["task"] == str(TASK)
    assert values["store_restored_bytes"] > 0
    if backend == "changelog":  # one changelog record per key update, known in advance by its offsets
        assert values["store_restored_records"] == values["store_restore_expected_records"] == 30
        assert values["store_restored_bulk_records"] == 30  # the embedded log hands its records over in bulk
    else:  # the snapshot's files, their size known from its index
        assert values["store_restored_bytes"] == values["store_restore_expected_bytes"]

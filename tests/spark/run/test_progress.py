"""The figures the driver mirrors into Spark's metrics system, from the containers' snapshots (the gauges
themselves, read back from the Spark UI, are tested in ``test_observability.py``)."""

from __future__ import annotations

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts.metrics import Sample
from millstream.contracts.metrics_snapshot import ContainerSnapshot, write_snapshot
from millstream.spark.run import progress
from millstream.spark.run.progress import FIGURES, Progress, progress_of
from tests.helpers import job_config


def snapshot(container: str, written_ms: int, processed: dict[str, int], lag: dict[str, int]) -> ContainerSnapshot:
    samples = [Sample("processed", "counter", (("task", task),), float(n)) for task, n in processed.items()]
    samples += [Sample("lag", "gauge", (("partition", "0"), ("task", task)), float(n)) for task, n in lag.items()]
    samples.append(Sample("processed_bytes", "counter", (), 999.0))  # a container-wide series is not a task's
    return ContainerSnapshot(container, 1, 1, written_ms, "running", samples)


def test_totals_sum_every_tasks_processed_and_lag_and_the_rate_is_per_second_of_snapshot_time():
    first_reading = [snapshot("0", 1_000, {"P0": 10}, {"P0": 5}), snapshot("1", 1_200, {"P1": 20}, {"P1": 1})]
    first = progress_of(first_reading, None)
    assert first == Progress(processed=30, lag=6, records_per_second=0, containers_reporting=2, written_ms=1_200)
    second_reading = [snapshot("0", 2_200, {"P0": 40}, {"P0": 0}), snapshot("1", 2_100, {"P1": 40}, {"P1": 0})]
    second = progress_of(second_reading, first)
    assert (second.processed, second.lag, second.records_per_second) == (80, 0, 50)


def test_no_newer_snapshot_or_a_count_that_went_back_is_a_rate_of_zero_not_a_negative_or_a_stale_one():
    before = progress_of([snapshot("0", 5_000, {"P0": 100}, {})], None)
    assert progress_of([snapshot("0", 5_000, {"P0": 100}, {})], before).records_per_second == 0
    restarted = progress_of([snapshot("0", 6_000, {"P0": 3}, {})], before)
    assert (restarted.processed, restarted.records_per_second) == (3, 0)
    assert progress_of([], None) == Progress(0, 0, 0, 0, 0)


class _RecordingGauge:
    def __init__(self, name: str, sets: list[tuple[str, int]]) -> None:
        self.name, self.sets = name, sets

    def setValue(self, value: int) -> None:  # py4j's LongAccumulator method
        self.sets.append((self.name, value))


def test_an_update_sets_the_processed_count_last_so_a_scrape_that_sees_it_sees_the_same_readings_other_figures(
    tmp_path, monkeypatch
):
    sets: list[tuple[str, int]] = []
    monkeypatch.setattr(progress, "spark_gauges", lambda sc, key: {f: _RecordingGauge(f, sets) for f in FIGURES})
    config = Settings.of(job_config(tmp_path, task="tests.jobs:MeteredPassThrough"))
    with metadata_store(config) as store:
        write_snapshot(store, snapshot("0", 1_000, {"P0": 10}, {"P0": 5}))
        write_snapshot(store, snapshot("1", 1_200, {"P1": 20}, {"P1": 1}))
        reading = progress.SparkProgress(None, config, store).update(generation=1)  # type: ignore[arg-type]
    assert reading is not None and reading.processed == 30
    assert sets == [("lag", 6), ("records_per_second", 0), ("containers_reporting", 2), ("processed", 30)]

"""Through the Spark runner, a failed container waits the restart strategy's growing delay before its next attempt,
in state ``backoff`` that ``/status.json`` and the metrics show; past the failure-rate limit the job fails naming
the limit, and a container that stops failing finishes the job with every output. The shared session retries a
container up to 4 times (``local[4,4]``). Each failure is at a different offset, so none is deterministic."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from millstream.api.task import InitableTask, TaskContext
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.metrics_snapshot import current_snapshots
from millstream.coordinator.prepare import prepare
from millstream.coordinator.status_document import status_document
from millstream.runtime.restart import read_restarts
from millstream.spark.run.runner import SparkJobRunner
from tests.helpers import create_stream, fill, job_config, output_origins, seal
from tests.jobs import PassThrough

pytestmark = pytest.mark.spark


class FailsEachAttemptElsewhere(PassThrough, InitableTask):
    """Attempt n fails at value n (n < ``test.failures``): a transient failure, never twice at one offset. A file
    per failure in ``test.marker.dir`` counts the attempts across Spark's retries."""

    def init(self, context: TaskContext) -> None:
        self.markers = Path(context.config.get("test.marker.dir", ""))
        self.failures = int(context.config.get("test.failures", "0"))
        self.attempt = len(list(self.markers.iterdir()))

    def process(self, envelope, collector, coordinator):
        if envelope.message == self.attempt and self.attempt < self.failures:
            (self.markers / str(self.attempt)).touch()
            raise ValueError(f"transient trouble at {envelope.message}")
        super().process(envelope, collector, coordinator)


def restarting_job(tmp_path: Path, failures: int, **extra: Any) -> Settings:
    markers = tmp_path / "markers"
    markers.mkdir()
    config = prepare(
        job_config(
            tmp_path,
            task=f"{__name__}:FailsEachAttemptElsewhere",
            test__marker__dir=str(markers),
            test__failures=str(failures),
            task__commit__ms=-1,
            job__container__restart__backoff__initial__ms=800,
            job__container__restart__backoff__multiplier=2,
            job__container__restart__backoff__jitter=0,
            metrics__enabled="true",
            **extra,
        )
    )
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    fill(config, "in", 1, 10)
    seal(config, "in")
    return config


class StatusWatch(threading.Thread):
    """Samples ``/status.json``'s container 0 while the job runs: the backoffs it showed, in order."""

    def __init__(self, config: Settings) -> None:
        super().__init__(daemon=True)
        self.config = config
        self.backoffs: list[tuple[int, int]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.1):
            shown = status_document(self.config)["containers"].get("0", {})
            seen = (shown.get("restarts"), shown.get("backoff-ms"))
            if shown.get("state") == "backoff" and seen not in self.backoffs:
                self.backoffs.append(seen)


def run_watched(config: Settings, spark: Any) -> tuple[SparkJobRunner, Any, list[tuple[int, int]]]:
    runner = SparkJobRunner(config, spark=spark)
    watch = StatusWatch(config)
    watch.start()
    try:
        result = runner.run()
    finally:
        watch.done.set()
        watch.join()
    return runner, result, watch.backoffs


def test_a_container_failing_faster_than_the_failure_rate_allows_backs_off_then_fails_the_job_naming_the_limit(
    tmp_path, spark_local
):
    config = restarting_job(tmp_path, failures=10, job__container__restart__failure__rate__max=2)
    runner, result, backoffs = run_watched(config, spark_local)
    assert result.outcome == "failed"
    assert result.error.startswith(
        "container 0 failed 3 times within 60000 ms, more than job.container.restart.failure.rate.max=2 allows "
        "(job.container.restart.failure.rate.interval.ms=60000); its last failure: "
    ), result.error
    assert "transient trouble at 2" in result.error
    assert backoffs == [(1, 800), (2, 1600)], "status showed each restart waiting, the delay doubling"
    assert coordination.container_epoch(runner.store, "0") == 4, "the attempt past the limit did not run"
    record = read_restarts(runner.store, "0")
    assert record is not None and (record.restarts, len(record.failures)) == (3, 3)
    samples = {s.name: s.value for s in current_snapshots(runner.store, result.generation)[0].samples}
    assert samples["container_restarts"] == 2
    assert samples["container_restart_backoff_seconds"] == 1.6


def test_a_container_that_stops_failing_after_backing_off_finishes_the_job_with_every_output(tmp_path, spark_local):
    config = restarting_job(tmp_path, failures=2)
    _, result, backoffs = run_watched(config, spark_local)
    assert result.outcome == "finished", result.error
    assert backoffs == [(1, 800), (2, 1600)]
    assert {value for _, value in output_origins(config)} == set(range(10))
    shown = status_document(config)["containers"]["0"]
    assert (shown["state"], shown["attempt"], shown["restarts"], shown["backoff-ms"]) == ("finished", 3, 2, 1600)

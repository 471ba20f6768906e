"""Through the Spark runner, a failure that repeats at the same offset ends the job after the second identical
attempt (``job.container.failure.repeat.limit``), not after every Spark retry; a failure that does not repeat is
retried as before. The session retries a failed container up to 4 times (``spark.task.maxFailures``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from millstream.api.task import InitableTask, TaskContext
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.coordinator.prepare import prepare
from millstream.spark.run.runner import SparkJobRunner
from tests.helpers import create_stream, fill, job_config, output_origins, seal
from tests.jobs import PassThrough

pytestmark = pytest.mark.spark


class FailsOnceAtThree(PassThrough, InitableTask):
    """Raises on the value 3 in its first attempt only: the marker file ``test.marker.path`` remembers it."""

    def init(self, context: TaskContext) -> None:
        self.marker = Path(context.config.get("test.marker.path", ""))

    def process(self, envelope, collector, coordinator):
        if envelope.message == 3 and not self.marker.exists():
            self.marker.touch()
            raise ValueError("transient trouble at 3")
        super().process(envelope, collector, coordinator)


def single_partition_job(tmp_path: Path, task: str, **extra: Any) -> Settings:
    config = prepare(job_config(tmp_path, task=task, job__container__retry__count=3, **extra))
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    fill(config, "in", 1, 10)
    seal(config, "in")
    return config


def test_a_failure_repeating_at_the_same_offset_fails_the_job_after_the_second_attempt(tmp_path, spark_local):
    config = single_partition_job(tmp_path, "tests.jobs:FailingOnSome", test__fail__values="3")
    runner = SparkJobRunner(config, spark=spark_local)
    result = runner.run()
    assert result.outcome == "failed"
    error = result.error or ""
    assert re.match(
        r"millstream\.runtime\.process_errors\.TaskProcessError: task 'Partition 0' failed processing offset 3 "
        r"of stream 'log\.in' partition 0: ValueError: cannot handle 3",
        error,
    ), error
    assert 'tests/jobs.py", line' in error and error.endswith("ValueError: cannot handle 3")
    assert coordination.container_epoch(runner.store, "0") == 2  # not the 4 attempts Spark would make
    assert coordination.container_failures(runner.store)["0"]["count"] == 2


def test_a_failure_that_does_not_repeat_is_retried_and_the_job_finishes(tmp_path, spark_local):
    marker = tmp_path / "failed-once"
    config = single_partition_job(
        tmp_path, f"{__name__}:FailsOnceAtThree", test__marker__path=str(marker), task__commit__ms=-1
    )
    runner = SparkJobRunner(config, spark=spark_local)
    result = runner.run()
    assert result.outcome == "finished", result.error
    assert marker.exists()
    assert coordination.container_epoch(runner.store, "0") == 2
    assert {value for _, value in output_origins(config)} == set(range(10))

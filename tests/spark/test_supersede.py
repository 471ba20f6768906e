"""A job run on Spark that another run of the same job supersedes hands over without a final commit
(the newer generation owns the checkpoints) and ends ``superseded``; the newer run resumes from its last
checkpoint, so every input still reaches the output."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from millstream.coordinator.job_result import JobResult
from millstream.coordinator.prepare import prepare
from millstream.spark.run.runner import SparkJobRunner
from tests.api.test_in_process import run_in_background
from tests.cli.test_main import _running_with_a_checkpoint
from tests.cli.test_run_signals import coordination_started
from tests.helpers import create_stream, fill, job_config, output_origins, wait_until

pytestmark = pytest.mark.spark


def test_a_spark_run_superseded_by_a_second_run_ends_superseded_and_the_second_loses_nothing(
    spark_local: Any, tmp_path: Path
) -> None:
    config = prepare(
        job_config(tmp_path, task="tests.jobs:SlowPassThrough", job__container__count=2, test__delay__seconds=0.002)
    )
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    written = fill(config, "in", 2, 1500)  # unbounded: never sealed
    first: dict[str, JobResult] = {}
    spark_run = threading.Thread(
        target=lambda: first.setdefault("result", SparkJobRunner(config, spark=spark_local).run())
    )
    spark_run.start()
    wait_until(lambda: _running_with_a_checkpoint(config), 120, "the Spark run processing with a checkpoint")

    second, thread, results = run_in_background(config)
    spark_run.join(120)
    assert not spark_run.is_alive(), "the superseded run did not end"
    assert first["result"].outcome == "superseded", first["result"].error
    started = coordination_started(config, first["result"].generation + 1)
    assert first["result"].error == f"generation 1 was superseded by generation 2 started at {started}"

    def everything_or_ended() -> bool:
        return set(output_origins(config)) == written or not thread.is_alive()

    wait_until(everything_or_ended, 120, "every input in the output")
    assert thread.is_alive(), f"the second run ended early: {results}"  # a late retry of the first must not fence it
    second.request_stop()
    thread.join(60)
    assert results["result"].outcome == "stopped", results["result"].error
    assert results["result"].generation == first["result"].generation + 1

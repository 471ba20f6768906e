"""Through the Spark runner, a stateful job with its checkpoints in Kafka rides out a broker restart: it finishes
with every count exact, no container attempt is fenced or retried, and commits resume within seconds of the
broker being back. The job is the soak harness's count-per-key job (input and changelog on the embedded log,
so the job ends by itself), without kills."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from benchmarks.soak import CheckpointWatch, Settings, check_output, restart_stall, soak_config, write_input
from millstream.spark.run.runner import SparkJobRunner
from tests.helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark]

RESUMED_WITHIN_S = 30.0
"""Generous on a loaded machine: the writer's backoff is capped at 2 s; the uncapped one stalled for minutes."""


def test_a_broker_restart_while_a_stateful_job_commits_checkpoints_to_kafka_is_transient(
    kafka_broker, bootstrap, tmp_path: Path, spark: SparkSession
) -> None:
    settings = Settings(kills=0, partitions=4, records=1500, delay_ms=1.0, commit_ms=300, bootstrap=bootstrap)
    config = soak_config(tmp_path, "changelog", settings, None)
    write_input(config, settings)
    watch = CheckpointWatch(config)
    outcome: dict = {}
    job = threading.Thread(target=lambda: outcome.update(result=SparkJobRunner(config, spark=spark).run()))
    watch.start()
    job.start()
    try:
        total = settings.partitions * settings.records
        wait_until(lambda: watch.checkpointed() >= total // 4 or not job.is_alive(), 240, "a quarter checkpointed")
        assert job.is_alive(), "the job ended before the broker restart: raise records"
        kafka_broker.restart(down_seconds=3)
        up_at = time.monotonic()
        job.join(600)
    finally:
        watch.done.set()
        watch.join()
    watch.final_sample()
    result = outcome["result"]
    assert result.outcome == "finished", result.error
    assert [container.epoch for container in result.containers] == [1, 1], "no attempt was fenced or retried"
    problems, _ = check_output(config, settings)
    assert problems == [] and watch.problems == []
    assert kafka_broker.stopped_at is not None
    stall = restart_stall(watch, kafka_broker.stopped_at, up_at)
    assert stall is not None, "no checkpoint was written after the broker stopped: raise records"
    assert stall < RESUMED_WITHIN_S, f"checkpoints resumed {stall:.1f} s after the broker was up"

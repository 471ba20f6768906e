"""Metrics through the Spark runner: containers in Python workers ship snapshots, the driver serves them."""

from __future__ import annotations

import threading

import pytest

from millstream.coordinator.job_result import JobResult
from millstream.spark.runner import SparkJobRunner
from tests.helpers import create_stream, fill, job_config
from tests.integration.processes import free_port
from tests.metrics.job_metrics import check_running_job
from tests.metrics.scrape import fetch

pytestmark = pytest.mark.spark

SECRET = "spark-secret-never-served"


def test_the_driver_serves_every_containers_metrics_and_the_job_status(spark_local, tmp_path) -> None:
    port = free_port()
    config = job_config(
        tmp_path,
        task="tests.jobs:MeteredPassThrough",
        job__container__count=2,
        metrics__prometheus__port=port,
        metrics__snapshot__interval__ms=200,
        sensitive__password=SECRET,
    )
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    fill(config, "in", 4, 250)  # never sealed: the job runs until stopped
    runner = SparkJobRunner(config, spark=spark_local)
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", runner.run()))
    job.start()
    try:
        document = check_running_job(port, 1000, 4, timeout=120)
        fill(config, "in", 4, 25, start=250)
        check_running_job(port, 1100, 4, timeout=120)
        metrics = fetch(port, "/metrics")[2]
    finally:
        runner.request_stop()
        job.join(120)

    assert outcome["result"].outcome == "stopped", outcome["result"].error
    assert set(document["containers"]) == {"0", "1"}
    assert {c["state"] for c in document["containers"].values()} == {"running"}
    assert sorted((row["stream"], row["partition"]) for row in document["partitions"]) == [("in", p) for p in range(4)]
    assert b'container="1"' in metrics and b'job="test"' in metrics
    assert SECRET.encode() not in metrics and SECRET not in str(document)

"""What a Spark run shows of itself: the status document, the Spark UI's job name with its link to the status
page, and the job's progress in Spark's metrics system (the progress line and the log format through
``millstream run`` are in ``tests/cli/test_main.py``)."""

from __future__ import annotations

import threading
import urllib.request
from typing import Any

import orjson
import pytest
from pyspark.sql import SparkSession

from millstream.coordinator.job_result import JobResult
from millstream.spark.run.runner import SparkJobRunner
from tests.helpers import create_stream, fill, job_config, wait_until
from tests.integration.processes import free_port
from tests.metrics.scrape import status_json

pytestmark = pytest.mark.spark


def _caught_up(port: int, produced: int) -> dict[str, Any] | None:
    document = status_json(port)
    live = [c for c in document.get("containers", {}).values() if c.get("state") == "running" and "processed" in c]
    return document if len(live) == 2 and sum(c["processed"] for c in live) == produced else None


def _spark_gauges(spark: SparkSession, runner: SparkJobRunner, processed: int) -> dict[str, int] | None:
    """The job's figures in Spark's metrics system, as the Spark UI's ``/metrics/json`` serves them, once they
    show ``processed`` (the driver sets that figure last in each reading)."""
    with urllib.request.urlopen(f"{spark.sparkContext.uiWebUrl}/metrics/json/", timeout=10) as reply:
        gauges = orjson.loads(reply.read())["gauges"]
    prefix = f".driver.AccumulatorSource.millstream.{runner.config.job.job_key}."
    figures = {name.split(prefix, 1)[1]: int(gauge["value"]) for name, gauge in gauges.items() if prefix in name}
    return figures if figures.get("processed") == processed else None


def test_the_status_document_and_the_spark_job_name_the_job_its_generation_and_containers(spark_local, tmp_path):
    port = free_port()
    config = job_config(
        tmp_path,
        task="tests.jobs:MeteredPassThrough",
        job__container__count=2,
        metrics__prometheus__port=port,
        metrics__snapshot__interval__ms=200,
    )
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    fill(config, "in", 4, 30)  # never sealed: the job runs until stopped
    runner = SparkJobRunner(config, spark=spark_local)
    tracker = spark_local.sparkContext.statusTracker()
    group = f"millstream-{runner.config.job.job_key}-g1"
    earlier = set(tracker.getJobIdsForGroup(group))  # the shared session remembers other tests' runs of this job
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", runner.run()))
    job.start()
    try:
        document = wait_until(lambda: _caught_up(port, 120), 120, "both containers to report 120 messages")
        gauges = wait_until(
            lambda: _spark_gauges(spark_local, runner, processed=120), 60, "Spark's metrics to show 120 processed"
        )
    finally:
        runner.request_stop()
        job.join(120)
    assert outcome["result"].outcome == "stopped", outcome["result"].error
    assert document is not None

    assert document["generation"] == 1
    model = document["model"]["containers"]
    assert sorted(model) == ["0", "1"]
    assigned = sorted(ssp for container in model.values() for ssps in container["tasks"].values() for ssp in ssps)
    assert assigned == [f"log.in.{p}" for p in range(4)]
    for cid, container in document["containers"].items():
        assert container["attempt"] == 1
        executor = container["executor"]
        assert executor["partition"] == int(cid) and executor["spark_attempt"] == 0  # Spark partition i = container i
        assert {"stage", "task_attempt_id", "executor_pid"} <= set(executor)
        assert set(container["tasks"]) == set(model[cid]["tasks"])
        assert all(task["lag"] == 0 and task["commits"] >= 0 for task in container["tasks"].values())
    assert [row["lag"] for row in document["partitions"]] == [0, 0, 0, 0]
    assert document["startpoints"]["pending"] == [] and isinstance(document["watermarks"], list)

    sc = spark_local.sparkContext
    job_ids = sorted(set(tracker.getJobIdsForGroup(group)) - earlier)
    assert len(job_ids) == 1
    job_data = sc._jsc.sc().statusStore().job(job_ids[0])
    description = job_data.description().get()
    host = sc.getConf().get("spark.driver.host")
    assert description == (
        "millstream job test generation 1: 2 containers (Spark partition i runs container i); "
        f"live progress: http://{host}:{port}/"
    )
    assert gauges is not None
    assert (gauges["lag"], gauges["containers_reporting"]) == (0, 2)
    assert gauges["records_per_second"] >= 0
    stage = sc.statusTracker().getStageInfo(sc.statusTracker().getJobInfo(job_ids[0]).stageIds[0])
    assert stage is not None and stage.numTasks == 2  # one Spark task per container

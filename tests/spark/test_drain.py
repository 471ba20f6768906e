"""Draining unbounded high-level jobs through the Spark runner: one job, and an application split into
two stages run as separate Spark jobs that share ``app.run.id`` — draining the first drains the second
through the intermediate stream."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from millstream.config import Config
from millstream.coordinator.drain import request_drain
from millstream.coordinator.job_result import JobResult
from millstream.spark.run.runner import SparkJobRunner
from tests.api.apps import app_config, messages
from tests.api.test_drain import checkpointed, expected_panes, last_offsets, panes
from tests.api.test_in_process import setup
from tests.helpers import wait_until

pytestmark = pytest.mark.spark


def run_in_background(config: Config, spark: Any) -> tuple[threading.Thread, dict[str, JobResult]]:
    results: dict[str, JobResult] = {}
    thread = threading.Thread(target=lambda: results.setdefault("result", SparkJobRunner(config, spark=spark).run()))
    thread.start()
    return thread, results


def test_a_drained_spark_job_fires_every_window_with_exact_counts_and_ends_drained(spark_local, tmp_path):
    config = app_config(
        tmp_path, "tests.api.apps:WindowedCount", job__container__count=2, job__drain__poll__interval__ms=200
    )
    data = {p: messages(p, 40) for p in range(3)}
    setup(config, data, sealed=False)
    thread, results = run_in_background(config, spark_local)
    wait_until(lambda: checkpointed(config) == last_offsets(data), 120, "every source message checkpointed")
    request_drain(config)
    thread.join(timeout=120)
    result = results["result"]
    assert result.outcome == "drained", result.error
    assert {c.outcome for c in result.containers} == {"drained"}
    assert panes(config) == expected_panes(data)
    assert checkpointed(config) == last_offsets(data)


def test_draining_stage_0_drains_stage_1_run_as_a_separate_spark_job_with_the_same_run_id(spark_local, tmp_path):
    data = {p: messages(p, 30) for p in range(2)}
    stages = [
        app_config(
            tmp_path,
            "tests.api.apps:WindowedCount",
            app__stage=stage,
            app__run__id="deploy-7",
            job__drain__poll__interval__ms=200,
        )
        for stage in (0, 1)
    ]
    setup(stages[0], data, sealed=False)
    jobs = [run_in_background(config, spark_local) for config in reversed(stages)]
    wait_until(lambda: checkpointed(stages[0]) == last_offsets(data), 120, "stage 0 checkpointed every message")
    assert request_drain(stages[0]).run_id == "deploy-7"
    for thread, _ in jobs:
        thread.join(timeout=120)
    outcomes = [results["result"] for _, results in jobs]
    assert [r.outcome for r in outcomes] == ["drained", "drained"], [r.error for r in outcomes]
    assert panes(stages[1]) == expected_panes(data)

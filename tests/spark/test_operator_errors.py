"""Through the Spark runner, a high-level operator's raising function follows ``task.process.errors`` as a
task's own exception does, and repeating at the same offset it ends the job after the second attempt."""

from __future__ import annotations

import pytest

from millstream.contracts import coordination
from millstream.spark.run.runner import SparkJobRunner
from tests.operators.test_operator_errors import FAILING, failing_app, outputs

pytestmark = pytest.mark.spark


def test_through_spark_skip_leaves_out_only_the_raising_messages(tmp_path, spark_local):
    config = failing_app(tmp_path, task__process__errors="skip", job__container__count=2)
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "finished", result.error
    assert outputs(config) == sorted(n for n in range(10) for _ in range(2) if n not in FAILING)


def test_through_spark_a_raising_operator_fails_the_job_after_the_second_identical_attempt(tmp_path, spark_local):
    config = failing_app(tmp_path, job__container__retry__count=3)
    runner = SparkJobRunner(config, spark=spark_local)
    result = runner.run()
    assert result.outcome == "failed"
    assert "operator 'check' failed: ValueError: cannot handle 3" in (result.error or ""), result.error
    assert coordination.container_epoch(runner.store, "0") == 2  # not every attempt Spark would make

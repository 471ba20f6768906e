"""``task.process.errors`` through the Spark runner: the policy holds in Spark's workers as in-process."""

from __future__ import annotations

import pytest

from millstream.spark.run.runner import SparkJobRunner
from tests.helpers import output_origins
from tests.runtime.test_process_errors import failing_job

pytestmark = pytest.mark.spark


def test_through_spark_skip_finishes_with_every_other_message_and_fail_names_the_message(tmp_path, spark_local):
    config, written = failing_job(tmp_path / "skip", task__process__errors="skip", job__container__count=2)
    skipped = SparkJobRunner(config, spark=spark_local).run()
    assert skipped.outcome == "finished", skipped.error
    assert sorted(output_origins(config)) == sorted(w for w in written if w[1] not in (3, 7))

    config, _ = failing_job(tmp_path / "fail", job__container__retry__count=0)
    failed = SparkJobRunner(config, spark=spark_local).run()
    assert failed.outcome == "failed"
    error = failed.error or ""
    assert error.startswith("millstream.runtime.process_errors.TaskProcessError: task 'Partition "), error
    assert "failed processing offset 3 of stream 'log.in'" in error
    assert 'tests/jobs.py", line' in error and error.endswith("ValueError: cannot handle 3")

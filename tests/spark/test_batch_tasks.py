"""``BatchStreamTask`` through the Spark runner: batches and ``send_batch`` in Spark's workers copy every
message once, and a raising batch fails the job naming the batch, as in-process."""

from __future__ import annotations

import re

import pytest

from millstream.spark.run.runner import SparkJobRunner
from tests.helpers import output_origins
from tests.runtime.test_batch_tasks import batch_job

pytestmark = pytest.mark.spark


def test_through_spark_a_batch_task_copies_every_message_once_and_a_raising_batch_is_named(tmp_path, spark_local):
    config, written = batch_job(tmp_path / "copy", per_partition=2000, job__container__count=2)
    copied = SparkJobRunner(config, spark=spark_local).run()
    assert copied.outcome == "finished", copied.error
    assert sorted(output_origins(config)) == sorted(written)

    config, _ = batch_job(tmp_path / "fail", test__fail__values="3", job__container__retry__count=0)
    failed = SparkJobRunner(config, spark=spark_local).run()
    assert failed.outcome == "failed"
    error = failed.error or ""
    assert error.startswith("millstream.runtime.process_errors.TaskProcessError: task 'Partition "), error
    assert re.search(r"failed processing the batch of offsets \d+\.\.\d+ of stream 'log\.in' partition \d", error)
    assert error.endswith("ValueError: cannot handle 3")

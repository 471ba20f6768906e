"""The Spark runner's driver opens each system's admin once for a run of two generations, as the in-process
runner does (``tests/coordinator/test_services.py``): its driver loop owns the driver's services."""

from __future__ import annotations

import pytest

from millstream import Job
from millstream.spark.run.runner import SparkJobRunner
from tests.coordinator.test_services import (
    assert_one_admin_per_system_on_the_driver,
    reset_counts,
    run_two_generations,
    two_system_job,
    with_sealed_inputs,
)

pytestmark = pytest.mark.spark


def test_a_spark_run_of_two_generations_opens_each_systems_admin_once_on_the_driver(spark_local, tmp_path):
    job = Job(two_system_job(tmp_path))
    with_sealed_inputs(job, sealed=False)
    reset_counts()

    result = run_two_generations(job, SparkJobRunner(job.config, spark=spark_local))

    assert result.outcome == "stopped", result.error
    assert_one_admin_per_system_on_the_driver(own_connection=False)  # SparkJobRunner() opened it

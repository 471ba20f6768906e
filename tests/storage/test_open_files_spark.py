"""The container's check of ``ulimit -n`` against its stores, through the Spark runner (local mode): a Python worker
runs at the JVM's limit, which the JVM raised to the hard one at start, so what is left to check is the hard one."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millstream.spark.run.runner import SparkJobRunner
from tests.helpers import seal
from tests.storage.test_stateful_jobs import config_for, prepare

pytestmark = pytest.mark.spark


def test_on_spark_stores_whose_bounds_exceed_the_hard_limit_fail_the_job_at_start_naming_the_key(
    spark_local: SparkSession, tmp_path: Path
) -> None:
    """Each container's task may hold the whole hard limit: together more than it, so no container starts, and the
    job fails at once with the key to lower instead of part-way through a run on 'Too many open files'."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        pytest.fail("this host's hard open-file limit is unlimited: no bound can exceed it")
    config = config_for(tmp_path, "changelog", stores__counts__rocksdb__max__open__files=hard)
    prepare(config)
    seal(config, "in")
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "failed"
    assert "ulimit -n" in str(result.error) and "stores.counts.rocksdb.max.open.files" in str(result.error)

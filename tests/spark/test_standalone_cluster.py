"""The same job on a Spark standalone cluster (a master and two workers on 127.0.0.1)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from millstream.spark.runner import SparkJobRunner
from millstream.spark.session import build_session
from tests.helpers import create_stream, fill, job_config, output_origins, seal
from tests.spark.standalone import StandaloneCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()  # one SparkContext per process: the local-mode session goes first
    # One core per worker: each executor can hold one container, so two containers must use two executors.
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), workers=2, cores=1).start()
    yield cluster
    cluster.stop()


def test_job_runs_on_a_standalone_cluster_with_containers_in_different_executors(cluster, tmp_path):
    config = job_config(
        tmp_path,
        job__container__count=2,
        job__coordinator__slots__headroom=0,
        spark__driver__host="127.0.0.1",
        spark__driver__bindAddress="127.0.0.1",
        spark__executor__memory="512m",
    )
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    written = fill(config, "in", 4, 250)
    seal(config, "in")

    spark = build_session(config, master=cluster.master_url)
    try:
        result = SparkJobRunner(config, spark=spark).run()
    finally:
        spark.stop()

    assert result.outcome == "finished", result.error
    assert set(output_origins(config)) == written
    executors = {c.container_id: (c.executor["executor_pid"], c.executor["cwd"]) for c in result.containers}
    assert executors["0"] != executors["1"], executors
    assert all("/worker-" in cwd for _, cwd in executors.values())

"""The same job on a Spark standalone cluster (a master and two workers on 127.0.0.1)."""

from __future__ import annotations

import time

import pytest
from pyspark.sql import SparkSession

from millstream.errors import ConfigError
from millstream.spark.runner import SparkJobRunner
from millstream.spark.session import build_session, cluster_slots
from tests.helpers import create_stream, fill, job_config, output_origins, seal, wait_until
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


def test_a_cluster_too_small_for_the_job_is_refused_within_the_slot_wait_naming_needed_and_offered_slots(
    cluster, tmp_path
):
    config = job_config(
        tmp_path,
        job__container__count=3,
        job__coordinator__slots__headroom=0,
        job__coordinator__slots__wait__ms=3000,
        spark__driver__host="127.0.0.1",
        spark__driver__bindAddress="127.0.0.1",
        spark__executor__memory="512m",
        spark__default__parallelism="200",  # Spark's estimate of parallelism must not pass for task slots
    )
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    spark = build_session(config, master=cluster.master_url)
    try:
        # two workers of one core each: two slots once both executors registered, whatever defaultParallelism says
        wait_until(lambda: cluster_slots(spark.sparkContext) == 2, 60, "both executors to register", interval=0.2)
        started = time.monotonic()
        with pytest.raises(ConfigError) as refused:
            SparkJobRunner(config, spark=spark).run()
        waited = time.monotonic() - started
    finally:
        spark.stop()
    assert refused.value.exit_code == 2
    message = str(refused.value)
    assert f"Spark master '{cluster.master_url}' offers 2 task slot(s) after waiting 3s" in message
    assert "needs 3 (3 container(s) + 0 headroom" in message
    for key in ("spark.task.cpus=1", "spark.executor.cores", "job.container.count", "job.coordinator.slots.wait.ms"):
        assert key in message
    assert 3 <= waited < 10

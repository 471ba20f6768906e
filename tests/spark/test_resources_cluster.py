"""Container sizing on a Spark standalone cluster (two workers of two cores on 127.0.0.1): the containers' stage
runs under a resource profile of ``job.container.cpus`` cores per task, and the slot check counts its slots."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

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
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-sizing"), workers=2, cores=2).start()
    yield cluster
    cluster.stop()


def _config(tmp_path: Any, containers: int, **extra: Any) -> Any:
    return job_config(
        tmp_path,
        job__container__count=containers,
        job__container__cpus=2,
        job__container__memory__mb=1024,
        job__coordinator__slots__headroom=0,
        spark__driver__host="127.0.0.1",
        spark__driver__bindAddress="127.0.0.1",
        spark__executor__memory="512m",
        **extra,
    )


def _stage_profiles(spark: SparkSession) -> dict[int, int]:
    """Each completed stage's resource profile id, as Spark's REST API reports it."""
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages?status=complete"
    with urllib.request.urlopen(url, timeout=30) as response:
        stages = json.load(response)
    return {stage["stageId"]: stage["resourceProfileId"] for stage in stages}


def test_containers_run_under_a_resource_profile_of_job_container_cpus_one_per_two_core_executor(cluster, tmp_path):
    config = _config(tmp_path, 2, job__coordinator__slots__wait__ms=120_000)
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    written = fill(config, "in", 4, 100)
    seal(config, "in")
    spark = build_session(config, master=cluster.master_url)
    try:
        result = SparkJobRunner(config, spark=spark).run()
        profiles = _stage_profiles(spark)
    finally:
        spark.stop()
    assert result.outcome == "finished", result.error
    assert set(output_origins(config)) == written
    assert {c.executor["cpus"] for c in result.containers} == {2}  # each container's task holds two cores
    executors = {c.executor["executor_pid"] for c in result.containers}
    assert len(executors) == 2, "a two-core executor holds one two-cpu container"
    stage = result.containers[0].executor["stage"]
    assert profiles[stage] != 0, f"the containers' stage ran under Spark's default profile: {profiles}"


def test_the_slot_check_counts_slots_of_job_container_cpus_and_refuses_a_cluster_too_small_for_them(cluster, tmp_path):
    config = _config(tmp_path, 3, job__coordinator__slots__wait__ms=2000)
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    spark = build_session(config, master=cluster.master_url)
    try:
        # four cores: four slots of one cpu, but two of two cpus
        wait_until(lambda: cluster_slots(spark.sparkContext) == 4, 120, "both executors to register", interval=0.2)
        started = time.monotonic()
        with pytest.raises(ConfigError) as refused:
            SparkJobRunner(config, spark=spark).run()
        waited = time.monotonic() - started
    finally:
        spark.stop()
    message = str(refused.value)
    assert "offers 2 task slot(s) after waiting 2s" in message
    assert "needs 3 (3 container(s) + 0 headroom; a slot is job.container.cpus=2 executor core(s))" in message
    assert 2 <= waited < 10

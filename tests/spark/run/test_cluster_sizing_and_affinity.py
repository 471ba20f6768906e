"""On a Spark standalone cluster (two workers of two cores on 127.0.0.1): container sizing (the containers' stage
runs under a resource profile of ``job.container.cpus`` cores per task, and the slot check counts its slots) and
host affinity (a container launched again goes to the executor recorded as its placement)."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest
from pyspark.sql import SparkSession

from millstream.composition.metadata import metadata_store
from millstream.contracts import coordination
from millstream.errors import ConfigError
from millstream.spark.run.runner import SparkJobRunner
from millstream.spark.run.session import build_session, cluster_slots
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
    settings: dict[str, Any] = {
        "job__container__cpus": 2,
        "job__container__memory__mb": 1024,
        "job__coordinator__slots__headroom": 0,
        "job__shared__filesystem": True,  # the log system and SQLite metadata: the workers share this host's disk
        "spark__driver__host": "127.0.0.1",
        "spark__driver__bindAddress": "127.0.0.1",
        "spark__executor__memory": "512m",
    }
    return job_config(tmp_path, job__container__count=containers, **{**settings, **extra})


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


def _executor_of(container: Any) -> str:
    """A standalone executor works in ``<worker dir>/<application id>/<executor id>``."""
    return str(container.executor["cwd"]).rstrip("/").rsplit("/", 1)[-1]


def test_a_container_launched_again_runs_on_the_executor_recorded_as_its_placement(cluster, tmp_path):
    config = job_config(
        tmp_path,
        "tests.jobs:SlowPassThrough",
        job__container__count=2,
        job__coordinator__slots__headroom=0,
        job__coordinator__slots__wait__ms=120_000,
        spark__driver__host="127.0.0.1",
        spark__driver__bindAddress="127.0.0.1",
        spark__executor__memory="512m",
        test__delay__seconds="0.01",
        job__shared__filesystem=True,  # the log system and SQLite metadata: the workers share this host's disk
    )
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    fill(config, "in", 4, 100)  # about two seconds per container: the driver sees them running
    seal(config, "in")
    spark = build_session(config, master=cluster.master_url)
    store = metadata_store(config)
    try:
        first = SparkJobRunner(config, spark=spark).run()
        assert first.outcome == "finished", first.error
        ran = {c.container_id: _executor_of(c) for c in first.containers}
        recorded = coordination.container_placements(store)
        assert {cid: p["executor_id"] for cid, p in recorded.items()} == ran  # the driver saw where they ran
        assert {p["application_id"] for p in recorded.values()} == {spark.sparkContext.applicationId}
        ids = spark.sparkContext._jsc.sc().getExecutorIds()
        executors = sorted(str(ids.apply(i)) for i in range(ids.size()))
        assert len(executors) == 2, executors
        # both containers are told they last ran on the executor container 0 did not run on: Spark spreads tasks
        # over the executors that offer slots, so only their preferred locations put both of them there
        target = next(e for e in executors if e != ran["0"])
        moved = {cid: target for cid in ran}
        for cid, executor in moved.items():
            placement = {**recorded[cid], "executor_id": executor}
            coordination.record_container_placement(store, cid, placement)
        second = SparkJobRunner(config, spark=spark).run()
    finally:
        store.close()
        spark.stop()
    assert second.outcome == "finished", second.error
    assert {c.container_id: _executor_of(c) for c in second.containers} == moved


def test_with_dynamic_allocation_containers_get_executors_of_their_own_profile_of_job_container_cpus(cluster, tmp_path):
    config = _config(
        tmp_path,
        2,
        job__container__cpus=1,
        job__container__memory__mb=300,
        # the previous test's executors free the workers' cores only once they have exited: on a loaded machine
        # that can take longer than the default wait
        job__coordinator__slots__wait__ms=120_000,
        spark__dynamicAllocation__enabled="true",
        spark__dynamicAllocation__shuffleTracking__enabled="true",
        spark__dynamicAllocation__initialExecutors="0",
    )
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    written = fill(config, "in", 4, 50)
    seal(config, "in")
    spark = build_session(config, master=cluster.master_url)
    try:
        result = SparkJobRunner(config, spark=spark).run()
        profiles = _stage_profiles(spark)
        sc = spark.sparkContext
        url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/allexecutors"
        with urllib.request.urlopen(url, timeout=30) as response:
            executors = json.load(response)
    finally:
        spark.stop()
    assert result.outcome == "finished", result.error
    assert set(output_origins(config)) == written
    stage = result.containers[0].executor["stage"]
    assert profiles[stage] != 0
    ran_under = {e["resourceProfileId"] for e in executors if e["id"] != "driver"}
    assert profiles[stage] in ran_under, f"no executor of the containers' profile was started: {executors}"


def _dynamic_config(tmp_path: Any, containers: int, headroom: int, **extra: Any) -> Any:
    """Dynamic allocation (shuffle tracking: standalone has no external shuffle service here) with no executors
    at start and none of millstream's sizing keys: the containers run under Spark's default profile."""
    return job_config(
        tmp_path,
        job__container__count=containers,
        job__coordinator__slots__headroom=headroom,
        job__coordinator__slots__wait__ms=120_000,
        job__shared__filesystem=True,  # the log system and SQLite metadata: the workers share this host's disk
        spark__driver__host="127.0.0.1",
        spark__driver__bindAddress="127.0.0.1",
        spark__executor__memory="512m",
        spark__executor__cores=1,
        spark__dynamicAllocation__enabled="true",
        spark__dynamicAllocation__shuffleTracking__enabled="true",
        spark__dynamicAllocation__initialExecutors="0",
        **extra,
    )


def test_with_dynamic_allocation_and_the_default_profile_the_slot_check_requests_executors_for_every_slot(
    cluster, tmp_path
):
    """Spark would request executors only for the containers' pending tasks, after the slot check: the check asks
    for an executor per slot (one core each), containers and headroom, and the job starts once they registered."""
    config = _dynamic_config(tmp_path, 2, 1)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    written = fill(config, "in", 2, 20)
    seal(config, "in")
    spark = build_session(config, master=cluster.master_url)
    try:
        assert cluster_slots(spark.sparkContext) == 0, "no executor before the job asks for them"
        result = SparkJobRunner(config, spark=spark).run()
        sc = spark.sparkContext
        url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/allexecutors"
        with urllib.request.urlopen(url, timeout=30) as response:
            executors = [e for e in json.load(response) if e["id"] != "driver"]
    finally:
        spark.stop()
    assert result.outcome == "finished", result.error
    assert set(output_origins(config)) == written
    assert len(executors) >= 3 and {e["totalCores"] for e in executors} == {1}, executors


def test_with_dynamic_allocation_a_max_executors_too_low_for_the_slots_is_refused_at_once(cluster, tmp_path):
    config = _dynamic_config(tmp_path, 2, 1, spark__dynamicAllocation__maxExecutors=2)
    spark = build_session(config, master=cluster.master_url)
    try:
        started = time.monotonic()
        with pytest.raises(ConfigError) as refused:
            SparkJobRunner(config, spark=spark).run()
        waited = time.monotonic() - started
    finally:
        spark.stop()
    message = str(refused.value)
    assert "at most spark.dynamicAllocation.maxExecutors=2 executor(s) of 1 task slot(s)" in message, message
    assert (
        "the job needs 3 (2 container(s) + 1 headroom): raise spark.dynamicAllocation.maxExecutors to at least 3"
        in (message)
    )
    assert waited < 10, "no wait can help: refused before any"


@pytest.fixture(scope="module")
def one_core_cluster(tmp_path_factory):
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-one-core"), workers=1, cores=1).start()
    yield cluster
    cluster.stop()


def test_with_dynamic_allocation_containers_too_large_for_every_worker_are_refused_before_they_launch(
    one_core_cluster, tmp_path
):
    """The cluster of the report: 1-core workers, dynamic allocation, ``job.container.cpus=2``. Spark would request
    2-core executors no worker can start and wait forever; the job is refused, naming the executor it needs, and
    no container ever started (none reported a status)."""
    config = _config(
        tmp_path,
        1,
        job__coordinator__slots__wait__ms=3000,
        spark__dynamicAllocation__enabled="true",
        spark__dynamicAllocation__shuffleTracking__enabled="true",
        spark__dynamicAllocation__initialExecutors="0",
    )
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    spark = build_session(config, master=one_core_cluster.master_url)
    try:
        with pytest.raises(ConfigError) as refused:
            SparkJobRunner(config, spark=spark).run()
        active_jobs = spark.sparkContext.statusTracker().getActiveJobsIds()
    finally:
        spark.stop()
    message = str(refused.value)
    assert "started no executor for the containers within 3s" in message, message
    needs = "each container needs an executor of 2 core(s) and 1024 MiB of memoryOverhead (job.container.cpus, "
    assert needs + "job.container.memory.mb)" in message, message
    assert "at least 2 core(s)" in message
    assert list(active_jobs) == [], "the probe stage was left running"
    with metadata_store(config) as store:
        assert coordination.container_statuses(store) == {}

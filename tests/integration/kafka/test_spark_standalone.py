"""A Kafka → Kafka job on a Spark standalone cluster (a master and two workers on 127.0.0.1) with
checkpoints and metadata in Kafka only: containers in different executors share nothing but Kafka."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from millstream.spark.session import build_session
from tests.integration.kafka.helpers import TopicTail, create_topic, job_config, produce_numbers
from tests.integration.kafka.test_spark_local import RunningJob, checkpointed_offsets, no_sqlite_files
from tests.spark.standalone import StandaloneCluster

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()  # one SparkContext per process: the local-mode session goes first
    # One core per worker: each executor holds one container, so two containers use two executors.
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone-kafka"), workers=2, cores=1).start()
    yield cluster
    cluster.stop()


def test_kafka_job_on_a_standalone_cluster_with_containers_in_different_executors(
    cluster, bootstrap, topic_name, tmp_path
):
    source, sink = topic_name("in"), topic_name("out")
    create_topic(bootstrap, source, 4)
    create_topic(bootstrap, sink, 4)
    config = job_config(
        bootstrap,
        tmp_path,
        source,
        sink,
        job__container__count=2,
        job__coordinator__slots__headroom=0,
        spark__driver__host="127.0.0.1",
        spark__driver__bindAddress="127.0.0.1",
        spark__executor__memory="512m",
    )
    written = produce_numbers(bootstrap, source, 4, 250)
    tail = TopicTail(bootstrap, sink, 4)
    spark = build_session(config, master=cluster.master_url)
    try:
        job = RunningJob(config, spark)
        try:
            tail.wait_for(written, timeout=180)
        finally:
            result = job.stop(timeout=180)
    finally:
        spark.stop()
    assert result.outcome == "stopped", result.error
    assert sorted(tail.origins()) == sorted(written)
    executors = {c.container_id: (c.executor["executor_pid"], c.executor["cwd"]) for c in result.containers}
    assert executors["0"] != executors["1"], executors
    assert all("/worker-" in cwd for _, cwd in executors.values())
    assert checkpointed_offsets(config) == {(p, p): 249 for p in range(4)}
    no_sqlite_files(tmp_path)
    tail.close()

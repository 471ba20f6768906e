"""The same job on a Spark standalone cluster (a master and two workers on 127.0.0.1)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

import millstream.spark.submit
from millstream.errors import ConfigError
from millstream.spark.run.multi_host import HostLocalStateError
from millstream.spark.run.runner import SparkJobRunner
from millstream.spark.run.session import build_session, cluster_slots
from tests.helpers import create_stream, fill, job_config, output_origins, seal, wait_until
from tests.spark.standalone import StandaloneCluster
from tests.spark.submit_signals import (
    SubmittedJob,
    assert_stopped_after_a_final_commit,
    expected_exit_code,
    stop_with_signal,
    unbounded_job,
)

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
        job__shared__filesystem=True,  # the log system and SQLite metadata: the workers share this host's disk
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
        job__shared__filesystem=True,  # the log system and SQLite metadata: the workers share this host's disk
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


def test_a_stop_while_the_runner_waits_for_slots_ends_the_run_stopped_without_waiting_out_the_slot_wait(
    cluster, tmp_path
):
    """A SIGTERM to spark-submit while a cluster's executors are still registering (or will never offer enough)
    stops the run at once, launching nothing: the JVM's shutdown hook waits only the stop timeout + 15 s."""
    config = job_config(
        tmp_path,
        job__container__count=3,  # the cluster's 2 slots will never do: only the stop can end the wait in time
        job__coordinator__slots__headroom=0,
        job__shared__filesystem=True,
        job__coordinator__slots__wait__ms=600_000,
        spark__driver__host="127.0.0.1",
        spark__driver__bindAddress="127.0.0.1",
        spark__executor__memory="512m",
    )
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    spark = build_session(config, master=cluster.master_url)
    try:
        runner = SparkJobRunner(config, spark=spark)
        results: list[Any] = []
        thread = threading.Thread(target=lambda: results.append(runner.run()), daemon=True)
        thread.start()
        wait_until(lambda: cluster_slots(spark.sparkContext) == 2, 60, "both executors to register", interval=0.2)
        runner.request_stop()
        wait_until(lambda: not thread.is_alive(), 60, "the run to end (the slot wait is 600 s)", interval=0.2)
    finally:
        spark.stop()
    assert [result.outcome for result in results] == ["stopped"]
    assert results[0].containers == []


def test_the_runner_refuses_host_local_state_on_the_cluster_naming_each_key_unless_declared_shared(cluster, tmp_path):
    config = job_config(
        tmp_path,
        job__container__count=2,
        job__coordinator__slots__headroom=0,
        stores__counts__backup__factories="blobstore",
        task__checkpoint__read__versions="2,1",
        spark__driver__host="127.0.0.1",
        spark__driver__bindAddress="127.0.0.1",
        spark__executor__memory="512m",
    )
    create_stream(config, "in", 2)
    spark = build_session(config, master=cluster.master_url)
    try:
        with pytest.raises(HostLocalStateError) as refused:
            SparkJobRunner(config, spark=spark).run()
    finally:
        spark.stop()
    assert refused.value.exit_code == 2
    assert [setting.key for setting in refused.value.settings] == [
        "task.inputs",
        "metadata.store.factory",
        "blob.store.manager.factory",
    ]
    assert f"Spark master '{cluster.master_url}' runs containers on several hosts" in str(refused.value)


REPO = Path(__file__).resolve().parents[3]


def client_mode_submit(cluster: StandaloneCluster, path: Path) -> list[str]:
    """``spark-submit`` of the entry point on the job in ``path`` to ``cluster``, the driver in this process
    (client mode), every process on 127.0.0.1 and the driver's and executors' Python this interpreter."""
    command = [str(cluster.spark_home / "bin" / "spark-submit"), "--master", cluster.master_url]
    command += ["--deploy-mode", "client"]
    for setting in (
        "spark.driver.host=127.0.0.1",
        "spark.driver.bindAddress=127.0.0.1",
        "spark.executor.memory=512m",
        "spark.ui.enabled=false",
        f"spark.pyspark.python={sys.executable}",
        f"spark.pyspark.driver.python={sys.executable}",
    ):
        command += ["--conf", setting]
    return [*command, millstream.spark.submit.__file__, str(path)]


def test_spark_submit_runs_a_job_on_the_standalone_cluster_in_client_mode_with_the_submitted_master(cluster, tmp_path):
    # executors of a fresh application take 20 s and more to register on a loaded 2-core machine
    config = job_config(
        tmp_path,
        job__container__count=2,
        job__coordinator__slots__headroom=0,
        job__shared__filesystem=True,  # the log system and SQLite metadata: the workers share this host's disk
        job__coordinator__slots__wait__ms=120_000,
    )
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    written = fill(config, "in", 4, 100)
    seal(config, "in")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config.to_dict()), encoding="utf-8")
    submitted = subprocess.run(
        client_mode_submit(cluster, path),
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},  # the task class is tests.jobs:PassThrough
        capture_output=True,
        text=True,
        timeout=240,
    )
    # spark-submit passes the Python driver's stderr on to its own stdout
    errors = [line for line in submitted.stdout.splitlines() if line.startswith(("error:", "job failed:"))]
    assert submitted.returncode == 0, "\n".join(errors) or (submitted.stdout + submitted.stderr)[-3000:]
    assert f"generation 1: finished on {cluster.master_url}" in submitted.stdout, submitted.stdout
    assert set(output_origins(config)) == written


def test_a_sigterm_to_spark_submits_process_group_on_the_standalone_cluster_stops_the_job_after_the_final_commit(
    cluster, tmp_path
):
    """systemd's and ``timeout``'s way: the signal reaches the JVM and the Python driver. Each alone is the same
    stop whatever the master, covered in local mode (test_submit.py)."""
    target = "group"
    config, path = unbounded_job(
        tmp_path / "data",
        tmp_path / "conf",
        job__shared__filesystem=True,  # the log system and SQLite metadata: the workers share this host's disk
        job__coordinator__slots__wait__ms=120_000,
    )
    job = SubmittedJob.start(
        client_mode_submit(cluster, path), REPO, {**os.environ, "PYTHONPATH": str(REPO)}, tmp_path / "logs"
    )
    try:
        # executors of a fresh application take 20 s and more to register on a loaded 2-core machine
        code = stop_with_signal(job, config, target, signal.SIGTERM, startup_s=240)
    finally:
        job.kill()
    assert code == expected_exit_code(target, signal.SIGTERM), job.text()[-4000:]
    assert_stopped_after_a_final_commit(config, job.text())

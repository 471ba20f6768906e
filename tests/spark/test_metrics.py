"""Metrics through the Spark runner: containers in Python workers ship snapshots, the driver serves them."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from millstream.composition.metadata import metadata_store
from millstream.contracts import coordination
from millstream.coordinator.job_result import JobResult
from millstream.model import SystemStream
from millstream.spark.run.runner import SparkJobRunner
from millstream.testing import write_stream
from tests.api.apps import messages
from tests.helpers import create_stream, fill, job_config, wait_until
from tests.integration.processes import free_port
from tests.metrics.apps import counting_windows_config
from tests.metrics.job_metrics import check_running_job
from tests.metrics.scrape import Series, fetch, present, scrape, total

pytestmark = pytest.mark.spark

SECRET = "spark-secret-never-served"


def test_the_driver_serves_every_containers_metrics_and_the_job_status(spark_local, tmp_path) -> None:
    port = free_port()
    config = job_config(
        tmp_path,
        task="tests.jobs:MeteredPassThrough",
        job__container__count=2,
        metrics__prometheus__port=port,
        metrics__snapshot__interval__ms=200,
        sensitive__password=SECRET,
    )
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    fill(config, "in", 4, 250)  # never sealed: the job runs until stopped
    runner = SparkJobRunner(config, spark=spark_local)
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", runner.run()))
    job.start()
    try:
        document = check_running_job(port, 1000, 4, timeout=120)
        fill(config, "in", 4, 25, start=250)
        check_running_job(port, 1100, 4, timeout=120)
        metrics = fetch(port, "/metrics")[2]
    finally:
        runner.request_stop()
        job.join(120)

    assert outcome["result"].outcome == "stopped", outcome["result"].error
    assert set(document["containers"]) == {"0", "1"}
    assert {c["state"] for c in document["containers"].values()} == {"running"}
    assert sorted((row["stream"], row["partition"]) for row in document["partitions"]) == [("in", p) for p in range(4)]
    assert b'container="1"' in metrics and b'job="test"' in metrics
    assert SECRET.encode() not in metrics and SECRET not in str(document)


def test_commit_phases_are_timed_and_a_sigkilled_container_shows_its_restore(spark_local, tmp_path) -> None:
    port = free_port()
    config = counting_windows_config(
        tmp_path,
        job__container__count=2,
        task__commit__ms=250,
        metrics__prometheus__port=port,
        metrics__snapshot__interval__ms=200,
    )
    create_stream(config, "in", 4)
    create_stream(config, "out", 1)
    for partition in range(4):
        write_stream(config, SystemStream("log", "in"), messages(partition, 50), partition=partition)
    runner = SparkJobRunner(config, spark=spark_local)
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", runner.run()))
    job.start()
    try:
        timed = wait_until(lambda: _commit_phases_timed(port, produced=200), 120, "every commit phase timed")
        assert timed is not None
        with metadata_store(config) as store:
            pid = int(coordination.container_statuses(store)["0"]["pid"])
        os.kill(pid, signal.SIGKILL)
        restored = wait_until(lambda: _restored_after_restart(port), 120, "container 0's restore after its restart")
        assert restored is not None
    finally:
        runner.request_stop()
        job.join(120)

    assert outcome["result"].outcome == "stopped", outcome["result"].error
    assert total(timed, "millstream_commit_seconds_count") > 0
    restored_bytes = total(restored, "millstream_store_restored_bytes", container="0", store="totals")
    assert restored_bytes > 0  # the blob-backed store was downloaded again (clean.on.container.start)
    assert restored_bytes == total(restored, "millstream_store_restore_expected_bytes", container="0", store="totals")
    assert present(restored, "millstream_store_restored_records")  # the changelog-backed store was replayed
    assert total(restored, "millstream_store_restore_duration_seconds_count", container="0") >= 2


def _commit_phases_timed(port: int, produced: int) -> Series | None:
    """Every phase timed, everything processed, and each task of container 0 checkpointed (so its restart
    has a snapshot to download)."""
    series = scrape(port)
    phases = ("flush", "snapshot", "upload", "checkpoint", "cleanup")
    timed = all(total(series, "millstream_commit_phase_seconds_count", phase=phase) > 0 for phase in phases)
    commits = {
        dict(labels)["task"]: value
        for (name, labels), value in series.items()
        if name == "millstream_commits_total" and ("container", "0") in labels
    }
    checkpointed = len(commits) == 2 and all(commits.values())
    return series if timed and checkpointed and total(series, "millstream_processed_total") >= produced else None


def _restored_after_restart(port: int) -> Series | None:
    """Container 0's second attempt has downloaded its blob-backed stores whole. Its snapshots ship from the
    start of the restore on, so an earlier one shows a download still under way (a restore that never
    reaches its expected bytes times the wait out)."""
    series = scrape(port)
    restarted = total(series, "millstream_container_attempt", container="0") >= 2
    expected = total(series, "millstream_store_restore_expected_bytes", container="0", store="totals")
    downloaded = (
        expected > 0 and total(series, "millstream_store_restored_bytes", container="0", store="totals") == expected
    )
    return series if restarted and downloaded else None

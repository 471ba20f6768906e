"""Through the Spark runner, in local mode and on a standalone cluster of two 1-core workers: a container that
falls silent — its process frozen, or its whole executor, as a network partition cuts a host off — is found by
its missing heartbeats and replaced by a new attempt within the liveness timeout, and the frozen attempt, once it
runs again, never overrides the live one's status."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from millstream.composition.metadata import metadata_store
from millstream.contracts import coordination
from millstream.coordinator.job_result import JobResult
from millstream.model import SystemStream
from millstream.spark.run.runner import SparkJobRunner
from millstream.spark.run.session import build_session
from millstream.testing import read_stream, write_stream
from tests.helpers import create_stream, job_config, wait_until
from tests.spark.standalone import StandaloneCluster

pytestmark = pytest.mark.spark


def _status(config: Any) -> dict[str, Any]:
    with metadata_store(config) as store:
        return coordination.container_statuses(store).get("0", {})


def _running(config: Any, after_attempt: int) -> dict[str, Any]:
    """Container 0's status once an attempt later than ``after_attempt`` reports itself running, else empty."""
    status = _status(config)
    return status if status.get("state") == "running" and status.get("attempt", 0) > after_attempt else {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_frozen_container_is_replaced_by_a_new_attempt_and_its_stale_status_never_overrides_it(
    spark_local: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = job_config(
        tmp_path,
        job__container__heartbeat__interval__ms=200,
        job__container__liveness__timeout__ms=2000,
    )
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    write_stream(config, SystemStream("log", "in"), [("k", {"n": n}) for n in range(10)], partition=0)
    runner = SparkJobRunner(config, spark=spark_local)
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", runner.run()), daemon=True)
    caplog.set_level(logging.WARNING, logger="millstream.spark.run.liveness")
    job.start()
    frozen = 0
    try:
        first = wait_until(lambda: _running(config, after_attempt=0), 120, "attempt 1 running")
        frozen = int(first["pid"])
        os.kill(frozen, signal.SIGSTOP)  # cut off: no heartbeat, no status, no log line
        live = wait_until(
            lambda: _running(config, after_attempt=first["attempt"]), 120, "a new attempt of container 0 running"
        )
        if _alive(frozen):
            os.kill(frozen, signal.SIGCONT)  # the partition heals: the old attempt runs on, fenced
        wait_until(lambda: not _alive(frozen), 120, "the frozen attempt's process to end")
        write_stream(config, SystemStream("log", "in"), [("k", {"n": n}) for n in range(10, 20)], partition=0)
        wait_until(lambda: len(read_stream(config, SystemStream("log", "out"))[0]) >= 20, 120, "all 20 processed")
        status = _status(config)
    finally:
        if frozen and _alive(frozen):
            os.kill(frozen, signal.SIGCONT)
        runner.request_stop()
        job.join(120)
    assert (status["attempt"], status["pid"], status["state"]) == (live["attempt"], live["pid"], "running"), status
    assert int(status["pid"]) != frozen
    assert outcome["result"].outcome == "stopped", outcome["result"].error
    assert any(
        "container 0 (attempt 1" in r.getMessage() and "sent no heartbeat" in r.getMessage() for r in caplog.records
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()  # one SparkContext per process: the local-mode session goes first
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-liveness"), workers=2, cores=1).start()
    yield cluster
    cluster.stop()


def _process_tree(root: int) -> list[int]:
    """``root`` and every process below it, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, []))
    return tree


def _executor_jvm(executor_id: str) -> int:
    """The pid of the standalone executor JVM with ``executor_id``."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in args and (
                args[args.index(b"--executor-id") + 1].decode() == executor_id
            ):
                return int(entry.name)
    raise AssertionError(f"no executor JVM with id {executor_id}")


def test_a_container_on_a_partitioned_executor_is_replaced_on_another_and_its_stale_status_never_overrides_it(
    cluster: StandaloneCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The whole executor is frozen (its JVM and Python workers), as a partition cuts a host off: the kill of the
    container's task cannot reach it, so the driver declares the executor lost and the container's next attempt
    runs on the other worker. When the partition heals, the old attempt's status never replaces the live one's."""
    config = job_config(
        tmp_path,
        job__container__heartbeat__interval__ms=200,
        job__container__liveness__timeout__ms=4000,  # above a new attempt's start on a loaded machine
        job__coordinator__slots__headroom=1,  # the second worker's executor, where the next attempt goes
        job__coordinator__slots__wait__ms=120_000,
        job__shared__filesystem=True,  # the log system and SQLite metadata: the workers share this host's disk
        spark__driver__host="127.0.0.1",
        spark__driver__bindAddress="127.0.0.1",
        spark__executor__memory="512m",
    )
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    write_stream(config, SystemStream("log", "in"), [("k", {"n": n}) for n in range(10)], partition=0)
    spark = build_session(config, master=cluster.master_url)
    runner = SparkJobRunner(config, spark=spark)
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", runner.run()), daemon=True)
    caplog.set_level(logging.WARNING, logger="millstream.spark.run.liveness")
    job.start()
    frozen: list[int] = []
    try:
        first = wait_until(lambda: _running(config, after_attempt=0), 120, "attempt 1 running")
        executor = str(first["cwd"]).rstrip("/").rsplit("/", 1)[-1]  # <worker dir>/<application>/<executor id>
        frozen = _process_tree(_executor_jvm(executor))
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        live = wait_until(
            lambda: _running(config, after_attempt=first["attempt"]), 120, "a new attempt on the other executor"
        )
        for pid in frozen:
            if _alive(pid):
                os.kill(pid, signal.SIGCONT)  # the partition heals
        wait_until(lambda: not _alive(int(first["pid"])), 120, "the old attempt's Python worker to end")
        write_stream(config, SystemStream("log", "in"), [("k", {"n": n}) for n in range(10, 20)], partition=0)
        wait_until(lambda: len(read_stream(config, SystemStream("log", "out"))[0]) >= 20, 120, "all 20 processed")
        status = _status(config)
    finally:
        for pid in frozen:
            if _alive(pid):
                os.kill(pid, signal.SIGCONT)
        runner.request_stop()
        job.join(120)
        spark.stop()
    assert str(live["cwd"]).rstrip("/").rsplit("/", 1)[-1] != executor, "the new attempt ran on the frozen executor"
    assert (status["attempt"], status["pid"], status["state"]) == (live["attempt"], live["pid"], "running"), status
    assert outcome["result"].outcome == "stopped", outcome["result"].error
    messages = [record.getMessage() for record in caplog.records]
    assert any(f"declaring executor {executor} lost" in message for message in messages), messages

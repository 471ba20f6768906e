"""Through the Spark runner (local mode): a container that falls silent — its process frozen, as a network
partition freezes it to the rest of the job — is found by its missing heartbeats and replaced by a new attempt
within the liveness timeout, and the frozen attempt, once it runs again, never overrides the live one's status."""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from millstream.coordinator.job_result import JobResult
from millstream.metadata import coordination
from millstream.metadata.factory import metadata_store
from millstream.model import SystemStream
from millstream.spark.runner import SparkJobRunner
from millstream.testing import read_stream, write_stream
from tests.helpers import create_stream, job_config, wait_until

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
    caplog.set_level(logging.WARNING, logger="millstream.spark.liveness")
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

"""A container of a Spark run stopped (``SIGSTOP``, in its Python worker) while it holds the SQLite metadata
store's write lock: a superseding run names the holder while it waits, ends it once its lease has expired and runs
the job to the end, and the Spark run ends ``superseded``; without a takeover, the run itself rides it out."""

from __future__ import annotations

import logging
import re
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from millstream.coordinator.job_result import JobResult
from millstream.coordinator.prepare import prepare
from millstream.file_locks import process_state
from millstream.spark.run.runner import SparkJobRunner
from millstream.testing import InProcessRunner
from tests.helpers import create_stream, fill, job_config, output_origins, seal, wait_until

pytestmark = pytest.mark.spark

STOP_AT = "checkpoint-v1"


def test_a_run_superseding_a_spark_run_ends_its_stopped_lock_holder_after_the_lease_and_finishes(
    spark_local: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="millstream.embedded.sqlite")
    markers = tmp_path / "markers"

    def config(lease_ms: int) -> Any:
        return prepare(
            job_config(
                tmp_path,
                job__container__count=2,
                metadata__store__lock__lease__ms=lease_ms,
                metadata__store__lock__wait__ms=200,
                metadata__store__testing__stop__in__write=STOP_AT,
                metadata__store__testing__marker__dir=markers,
            )
        )

    # The lease is the waiter's: the Spark run's driver and containers would wait a long time, the new run 2 s.
    spark_config, superseding = config(600_000), config(2_000)
    create_stream(spark_config, "in", 2)
    create_stream(spark_config, "out", 1)
    written = fill(spark_config, "in", 2, 30)
    first: dict[str, JobResult] = {}
    spark_run = threading.Thread(
        target=lambda: first.setdefault("result", SparkJobRunner(spark_config, spark=spark_local).run())
    )
    spark_run.start()
    marker = markers / f"metadata-write-{STOP_AT}"
    wait_until(lambda: marker.exists() and process_state(int(marker.read_text())) == "stopped", 180, "a stopped holder")
    holder_pid = int(marker.read_text())

    seal(spark_config, "in")
    result = InProcessRunner(superseding).run(timeout=120)
    assert result.outcome == "finished", result.error
    assert result.generation == 2
    named = rf"held by container \S+ attempt 1 pid {holder_pid} on host {re.escape(socket.gethostname())} since "
    assert re.search(named, caplog.text), caplog.text
    assert f"ending pid {holder_pid} so this newer run can take over" in caplog.text
    spark_run.join(120)
    assert not spark_run.is_alive(), "the superseded Spark run did not end"
    assert first["result"].outcome == "superseded", first["result"].error
    assert set(output_origins(spark_config)) == written


def test_a_spark_run_whose_container_stops_holding_the_lock_rides_it_out_and_finishes(
    spark_local: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No takeover: the other container waits instead of failing its commits (the workers' logs, naming the holder,
    are not captured here; the store's tests check them), the driver's liveness check finds the stopped container
    silent and replaces it (Spark ends its worker, which releases the lock), and the run finishes with every input
    in the output."""
    caplog.set_level(logging.WARNING)
    markers = tmp_path / "markers"
    config = prepare(
        job_config(
            tmp_path,
            job__container__count=2,
            metadata__store__lock__wait__ms=200,
            metadata__store__testing__stop__in__write=STOP_AT,
            metadata__store__testing__marker__dir=markers,
        )
    )
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    written = fill(config, "in", 2, 30)
    seal(config, "in")
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "finished", result.error
    assert (markers / f"metadata-write-{STOP_AT}").read_text().isdigit()  # a container did stop holding the lock
    assert re.search(r"container \S+ \(attempt 1, executor .* sent no heartbeat", caplog.text), caplog.text
    assert "past its lease" not in caplog.text
    assert set(output_origins(config)) == written

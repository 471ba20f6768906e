"""A run whose driver died is known as such: ``job status`` says since when its driver is lost instead of
showing its dead containers running, ``job drain`` refuses it, and containers whose driver went silent commit and
stop by themselves (through the Spark runner), never running headless."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from millstream.config.settings import Settings
from millstream.coordinator.drain import DrainRefusedError, request_drain
from millstream.coordinator.prepare import load_job_config
from millstream.coordinator.status import job_status
from millstream.spark.run.runner import SparkJobRunner
from tests.cli.test_main import _running_with_a_checkpoint, millstream, start_job, wait_for, write_config
from tests.helpers import create_stream, fill, job_config, output_origins, wait_until


def test_a_killed_driver_is_reported_lost_and_its_run_cannot_be_drained(tmp_path: Path) -> None:
    values = {
        "task.class": "tests.jobs:SlowPassThrough",
        "test.delay.seconds": 0.001,
        "job.driver.heartbeat.interval.ms": 200,
        "job.driver.liveness.timeout.ms": 2000,
    }
    path = write_config(tmp_path, values)
    config = load_job_config(path)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 3000)  # unbounded: not sealed
    job, _, stderr = start_job(path, tmp_path, "--in-process")
    try:
        wait_for(lambda: _running_with_a_checkpoint(config), timeout=60, process=job, log=stderr)
        assert job_status(config).driver.state == "alive"
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the driver and its containers die without a word
        job.wait()
    assert {info["state"] for info in job_status(config).containers.values()} == {"running"}, "as they last said"
    wait_until(lambda: job_status(config).driver.state == "lost", 30, "the driver to be judged lost")
    shown = millstream("job", "status", path)
    assert shown.returncode == 0, shown.stderr
    assert "driver lost at " in shown.stdout and "the run lost its driver" in shown.stdout
    with pytest.raises(DrainRefusedError, match="its driver is lost at"):
        request_drain(config)
    drained = millstream("job", "drain", path)
    assert drained.returncode != 0 and "its driver is lost at" in drained.stderr


@pytest.mark.spark
def test_containers_whose_driver_went_silent_commit_and_stop_by_themselves(spark_local, tmp_path: Path) -> None:
    """The driver's first heartbeat is its last (an hour's interval): to the containers it is a driver that
    died, so they stop within the timeout, having committed what they output."""
    config = Settings.of(
        job_config(
            tmp_path,
            task="tests.jobs:SlowPassThrough",
            test__delay__seconds="0.002",
            job__driver__heartbeat__interval__ms="3600000",
            job__driver__liveness__timeout__ms="3000",
        )
    )
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    written = fill(config, "in", 2, 100_000)  # unbounded and far more than 3 s of work
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "stopped", result.error
    status = job_status(config)
    assert {info["state"] for info in status.containers.values()} == {"stopped"}
    assert status.driver.state == "ended"
    checkpointed = {row.ssp.partition: int(row.checkpointed) for row in status.lag if row.checkpointed is not None}
    origins = set(output_origins(config))
    assert origins <= written and len(origins) < len(written), "stopped long before the end of its input"
    for partition, offset in checkpointed.items():  # what the final commit covers reached the output
        assert {(partition, value) for value in range(offset + 1)} <= origins

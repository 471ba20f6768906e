"""``millstream run --in-process`` stops as gracefully as the Spark runner: on Ctrl-C or SIGTERM its
containers flush, commit and return, the command exits 0, and a rerun resumes after the checkpoint."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from millstream.coordinator.prepare import load_job_config
from tests.cli.test_main import (
    _running_with_a_checkpoint,
    by_input_partition,
    millstream,
    start_job,
    table_rows,
    wait_for,
    write_config,
)
from tests.helpers import create_stream, fill


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_an_in_process_job_with_exit_0_after_flushing_and_committing(tmp_path: Path, signum: int):
    path = write_config(tmp_path, {"task.class": "tests.jobs:SlowPassThrough", "test.delay.seconds": 0.001})
    config = load_job_config(path)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 3000)  # unbounded: not sealed, the job would run forever
    job, stdout, stderr = start_job(path, tmp_path, "--in-process")
    try:
        wait_for(lambda: _running_with_a_checkpoint(config), timeout=60, process=job, log=stderr)
        job.send_signal(signum)
        stopped_at = time.monotonic()
        code = job.wait(timeout=30)
        assert time.monotonic() - stopped_at < 30
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert code == 0, stderr.read_text()
    assert f"{signal.Signals(signum).name}: stopping containers gracefully" in stderr.read_text()
    assert "generation 1: stopped" in stdout.read_text()
    checkpointed = {row[1]: int(row[2]) for row in table_rows(millstream("checkpoint", "show", path).stdout)}
    assert set(checkpointed) == {"log.in.0", "log.in.1"}
    output = by_input_partition(config)
    for partition in (0, 1):
        # the final commit covers what the job wrote, and everything it covers reached the output
        assert set(range(checkpointed[f"log.in.{partition}"] + 1)) <= set(output[partition])
        assert max(output[partition]) == checkpointed[f"log.in.{partition}"]

"""``millstream job drain``: a running unbounded job drains and ``millstream run`` exits 0 reporting
``drained``; a job that is not running, or a run id that is not the running one, is refused with exit 2."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from millstream.coordinator.prepare import load_job_config
from tests.api.test_drain import checkpointed
from tests.cli.test_main import millstream, start_job, wait_for, write_config
from tests.helpers import create_stream, fill


def test_job_drain_makes_a_running_job_commit_and_exit_0_as_drained(tmp_path: Path):
    path = write_config(tmp_path, {"task.class": "tests.jobs:DrainReportingTask", "job.drain.poll.interval.ms": 100})
    config = load_job_config(path)
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    fill(config, "in", 2, 50)  # unbounded: not sealed, the job would run forever
    job, stdout, stderr = start_job(path, tmp_path, "--in-process")
    try:
        wait_for(lambda: checkpointed(config) == {"log.in.0": 49, "log.in.1": 49}, 60, job, stderr)
        refused = millstream("job", "drain", path, "--run-id", "generation-7")
        assert refused.returncode == 2 and "'generation-7' is not the running run" in refused.stderr
        drained = millstream("job", "drain", path)
        assert drained.returncode == 0, drained.stderr
        assert "drain requested for run 'generation-1'" in drained.stdout
        code = job.wait(timeout=60)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert code == 0, stderr.read_text()
    assert "generation 1: drained" in stdout.read_text()


def test_job_drain_of_a_job_that_is_not_running_exits_2_saying_so(tmp_path: Path):
    path = write_config(tmp_path)
    result = millstream("job", "drain", path)
    assert result.returncode == 2
    assert "job 'cli-test' is not running" in result.stderr


def test_job_drain_of_a_stage_looks_for_the_stage_job_named_by_stage(tmp_path: Path):
    path = write_config(tmp_path, {"task.class": None, "task.inputs": None, "app.class": "tests.api.apps:TwoHops"})
    result = millstream("job", "drain", path, "--stage", "1")
    assert result.returncode == 2
    assert "job 'cli-test-stage-1' is not running" in result.stderr

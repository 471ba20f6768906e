"""Kinesis through the engine in-process: checkpoints across runs, and startpoints set with the operator tools."""

from __future__ import annotations

import threading
import time

import pytest

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts.startpoints import StartpointOldest, StartpointTimestamp
from millstream.coordinator.job_result import JobResult
from millstream.startpoint.manager import StartpointManager
from millstream.startpoint.tools import set_startpoints
from millstream.testing import InProcessRunner
from tests.integration.kinesis.helpers import SYSTEM, create_stream
from tests.integration.kinesis.jobs_support import Loader, job_config, output, wait_until

pytestmark = pytest.mark.integration


def run_until(config: Settings, total: int) -> None:
    """Run the job in-process until ``log.out`` holds ``total`` records, then stop it (it commits)."""
    runner = InProcessRunner(config)
    outcome: dict[str, JobResult] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("r", runner.run(timeout=120)), daemon=True)
    thread.start()
    try:
        wait_until(lambda: not thread.is_alive() or len(output(config)) >= total, 60, f"{total} records out")
    finally:
        runner.request_stop()
        thread.join(60)
    assert outcome["r"].outcome == "stopped", outcome["r"].error


def test_checkpoints_carry_a_job_across_runs_and_startpoints_move_every_shard_once(
    kinesis_endpoint, tmp_path, stream_name
):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 2)
    config = job_config(kinesis_endpoint, tmp_path, stream, job__container__count=2)
    loader = Loader(kinesis_endpoint, stream, keys=8)
    loader.write(5)
    time.sleep(0.05)
    instant = int(time.time() * 1000)
    time.sleep(0.05)
    loader.write(5)

    run_until(config, 80)
    assert len(output(config)) == 80
    run_until(config, 80)  # nothing new: the second run resumes after the checkpoints (and has stopped)
    assert len(output(config)) == 80

    set_startpoints(config, f"{SYSTEM}.{stream}", StartpointOldest())
    run_until(config, 160)
    assert sorted((r["key"], r["n"]) for r in output(config)[80:]) == sorted(loader.all_written())
    used = {r["slot"] for r in output(config)[80:]}
    kept = {ssp.partition for ssps in StartpointManager(metadata_store(config)).all_fan_outs().values() for ssp in ssps}
    assert used and not kept & used, "a slot that processed a record committed and deleted its startpoint"
    # a slot that stayed empty keeps it (as an idle Samza partition does); it is not applied again below

    set_startpoints(config, f"{SYSTEM}.{stream}", StartpointTimestamp(instant))
    run_until(config, 200)
    late = {(key, n) for key, ns in loader.written.items() for n in ns[5:]}
    assert {(r["key"], r["n"]) for r in output(config)[160:]} == late

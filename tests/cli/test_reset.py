"""``millstream job reset``: a stateful job reset on the embedded log runs again as from scratch; ``--dry-run``
lists what a reset deletes and deletes nothing; a running job is refused with exit 2."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.coordinator.prepare import load_job_config
from millstream.model import SystemStream
from millstream.testing import InProcessRunner, read_stream, write_stream
from tests.api.apps import reference_stateful, stateful_records, user_messages
from tests.api.test_drain import checkpointed
from tests.cli.test_main import millstream, start_job, wait_for, write_config
from tests.helpers import create_stream, fill, seal

APP = {"task.class": None, "task.inputs": None, "app.class": "tests.api.apps:SessionsJoinAndCounts"}


def outputs(config: Config) -> list[dict[str, Any]]:
    return [value for pairs in read_stream(config, SystemStream("log", "out")).values() for _, value in pairs]


def checkpoints(config: Settings) -> dict[str, Any]:
    with metadata_store(config) as store, checkpoint_manager(config, store) as manager:
        manager.start()
        return {str(task): checkpoint for task, checkpoint in manager.read_all().items()}


def run_to_the_end(config: Config) -> None:
    result = InProcessRunner(config).run(timeout=120)
    assert result.outcome == "finished", result.error


def run_once_on(config: Config, data: dict[int, list[tuple[str, Any]]]) -> list[dict[str, Any]]:
    """Write ``data`` to a sealed 2-partition ``log.in``, run the stateful application to its end; its outputs,
    checked against the reference."""
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    for partition, pairs in data.items():
        write_stream(config, SystemStream("log", "in"), pairs, partition=partition)
    seal(config, "in")
    run_to_the_end(config)
    first = outputs(config)
    assert stateful_records(first) == reference_stateful(data)
    return first


def test_a_reset_stateful_job_runs_again_as_from_scratch_and_a_dry_run_deletes_nothing(tmp_path: Path):
    path = write_config(tmp_path, {**APP, "job.container.count": 2})
    config = load_job_config(path)
    data = {p: user_messages(p, 30) for p in range(2)}
    first = run_once_on(config, data)
    stores = tmp_path / "data" / "jobs"
    assert any(stores.rglob("operator-state")), "the job kept local state"

    dry = millstream("job", "reset", path, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    for listed in (
        "checkpoints of 2 task(s): Partition 0, Partition 1",
        "stream log.cli-test-1-operator-state-changelog (changelog of store 'operator-state')",
        "stream log.cli-test-1-by-user (intermediate stream)",
        "stream log.cli-test-1-evens (intermediate stream)",
        "local state: ",
        "dry run: nothing was deleted",
    ):
        assert listed in dry.stdout, (listed, dry.stdout)
    assert "log.in " not in dry.stdout and "log.out " not in dry.stdout, "inputs and outputs are kept"
    assert len(checkpoints(config)) == 2, "a dry run deletes nothing"

    done = millstream("job", "reset", path)
    assert done.returncode == 0, done.stderr
    assert "deleted for job 'cli-test'" in done.stdout
    assert checkpoints(config) == {}
    assert not any(stores.rglob("Partition_*")), "no task's local state is left"
    assert "has nothing to reset" in millstream("job", "reset", path, "--dry-run").stdout

    run_to_the_end(config)
    second = outputs(config)[len(first) :]
    assert stateful_records(second) == reference_stateful(data), "running counts and sessions start over"
    assert len(second) == len(first), "every input message processed again, once"


def test_a_reset_of_a_running_job_exits_2_and_deletes_nothing(tmp_path: Path):
    path = write_config(tmp_path)
    config = load_job_config(path)
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    fill(config, "in", 2, 20)  # unbounded: not sealed, the job runs until stopped
    job, _, stderr = start_job(path, tmp_path, "--in-process")
    try:
        wait_for(lambda: checkpointed(config) == {"log.in.0": 19, "log.in.1": 19}, 60, job, stderr)
        refused = millstream("job", "reset", path)
        assert refused.returncode == 2
        assert "job 'cli-test' is running" in refused.stderr and "nothing was deleted" in refused.stderr
        assert checkpointed(config) == {"log.in.0": 19, "log.in.1": 19}
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=60)

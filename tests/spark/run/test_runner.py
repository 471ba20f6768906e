"""Jobs through the Spark runner on local mode: the same containers as in production, in Python workers."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.contracts import coordination
from millstream.coordinator.job_result import JobResult
from millstream.spark.run.runner import SparkJobRunner
from tests.helpers import create_stream, fill, job_config, output_origins, seal

pytestmark = pytest.mark.spark


def test_four_partitions_two_containers_process_every_message_exactly_once(spark_local, tmp_path):
    config = job_config(tmp_path, job__container__count=2)
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    written = fill(config, "in", 4, 500)
    seal(config, "in")

    result = SparkJobRunner(config, spark=spark_local).run()

    assert result.outcome == "finished", result.error
    origins = output_origins(config)
    assert len(origins) == len(written)
    assert set(origins) == written
    assert sorted(c.container_id for c in result.containers) == ["0", "1"]
    assert all(c.messages == 1000 for c in result.containers)


def test_a_sigkilled_container_is_retried_and_resumes_from_its_checkpoint(spark_local, tmp_path):
    config = job_config(
        tmp_path, task="tests.jobs:SlowPassThrough", job__container__count=2, test__delay__seconds=0.003
    )
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    written = fill(config, "in", 4, 600)
    seal(config, "in")
    store = metadata_store(config)
    runner = SparkJobRunner(config, spark=spark_local)
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", runner.run()))
    job.start()

    history = CheckpointHistory(config, store)
    victim = wait_for(lambda: _running_with_progress(store, history, "0"), timeout=60)
    os.kill(victim, signal.SIGKILL)
    while job.is_alive():
        history.sample()
        time.sleep(0.05)
    job.join()

    result = outcome["result"]
    assert result.outcome == "finished", result.error
    assert history.samples > 5
    assert not history.regressions, history.regressions
    assert {c.container_id: c.epoch for c in result.containers}["0"] >= 2
    assert set(output_origins(config)) == written


def test_graceful_stop_commits_and_a_restart_resumes_after_the_checkpoint(spark_local, tmp_path):
    config = job_config(tmp_path, task="tests.jobs:SlowPassThrough", test__delay__seconds=0.001)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    first_batch = fill(config, "in", 2, 300)
    runner = SparkJobRunner(config, spark=spark_local)
    store = metadata_store(config)
    threading.Timer(
        0.5, lambda: runner.request_stop() if wait_for(lambda: _all_read(config, store, 600), 60) else None
    ).start()
    first = runner.run()
    assert first.outcome == "stopped", first.error
    assert set(output_origins(config)) == first_batch

    second_batch = fill(config, "in", 2, 100, start=300)
    seal(config, "in")
    second = SparkJobRunner(config, spark=spark_local).run()
    assert second.outcome == "finished", second.error
    assert second.generation == first.generation + 1
    assert second.messages == 200
    origins = output_origins(config)
    assert len(origins) == 800 and set(origins) == first_batch | second_batch


def test_a_failing_container_fails_the_job_with_the_cause(spark_local, tmp_path):
    config = job_config(tmp_path, task="tests.jobs:FailsOnPoison", job__container__retry__count=1)
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    from millstream.model import SystemStream
    from millstream.testing import write_stream

    write_stream(config, SystemStream("log", "in"), [("a", "ok"), ("b", "poison")])
    seal(config, "in")
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "failed" and result.error is not None
    assert "ValueError: poison message at offset 1" in result.error


def test_too_few_task_slots_is_refused_before_launching(spark_local, tmp_path):
    from millstream.errors import ConfigError

    config = job_config(tmp_path, job__container__count=4)
    create_stream(config, "in", 4)
    with pytest.raises(ConfigError, match=r"offers 4 task slot.*needs 5"):
        SparkJobRunner(config, spark=spark_local).run()


class CheckpointHistory:
    """Samples every task's checkpoint and records any offset that moved backwards."""

    def __init__(self, config, store) -> None:
        self.manager = checkpoint_manager(config, store)
        self.latest: dict = {}
        self.regressions: list = []
        self.samples = 0

    def sample(self) -> dict:
        for task, checkpoint in self.manager.read_all().items():
            for ssp, offset in checkpoint.offsets.items():
                previous = self.latest.get((task, ssp))
                if previous is not None and offset is not None and int(offset) < int(previous):
                    self.regressions.append((task, ssp, previous, offset))
                self.latest[(task, ssp)] = offset
        self.samples += 1
        return self.latest


def _running_with_progress(store, history: CheckpointHistory, container_id: str) -> int | None:
    status = coordination.container_statuses(store).get(container_id, {})
    history.sample()
    if status.get("state") == "running" and len(history.latest) >= 2:
        return int(status["pid"])
    return None


def _all_read(config, store, total: int) -> bool:
    checkpoints = checkpoint_manager(config, store).read_all()
    done = sum(int(o) + 1 for c in checkpoints.values() for o in c.offsets.values() if o is not None)
    return done >= total


def wait_for(probe, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout}s")

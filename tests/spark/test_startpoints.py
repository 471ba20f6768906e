"""Startpoints through the Spark runner: only the partitions given one move; the others resume."""

from __future__ import annotations

import collections
import os
import signal
import threading
import time

import pytest

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.startpoints import (
    StartpointOldest,
    StartpointSpecific,
    StartpointTimestamp,
    StartpointUpcoming,
    now_ms,
)
from millstream.coordinator.job_result import JobResult
from millstream.model import SystemStream
from millstream.spark.run.runner import SparkJobRunner
from millstream.startpoint.manager import StartpointManager
from millstream.startpoint.tools import set_startpoints
from millstream.testing import write_stream
from tests.helpers import create_stream, fill, job_config, output_origins, seal
from tests.spark.run.test_runner import wait_for

pytestmark = pytest.mark.spark


def checkpointed(config: Settings) -> int:
    checkpoints = checkpoint_manager(config, metadata_store(config)).read_all()
    return sum(int(o) + 1 for c in checkpoints.values() for o in c.offsets.values() if o is not None)


def first_run_reads_half(spark, config: Settings) -> None:
    """Run an unbounded job over offsets 0-4 of 4 partitions, stop it gracefully once all is checkpointed."""
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    fill(config, "in", 4, 5)
    runner = SparkJobRunner(config, spark=spark)
    threading.Thread(
        target=lambda: runner.request_stop() if wait_for(lambda: checkpointed(config) >= 20, 60) else None
    ).start()
    assert runner.run().outcome == "stopped"


def counts(config: Settings) -> dict[int, collections.Counter]:
    by_partition: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for partition, value in output_origins(config):
        by_partition[partition][value] += 1
    return by_partition


def expected(run_two: range) -> collections.Counter:
    return collections.Counter(list(range(5)) + list(run_two))


def test_specific_and_timestamp_startpoints_move_only_their_partitions(spark_local, tmp_path):
    config = job_config(tmp_path, job__container__count=2)
    first_run_reads_half(spark_local, config)
    write_stream(config, SystemStream("log", "in"), [("k", v) for v in (5, 6)] * 1, partition=1)
    for partition in (0, 2, 3):
        write_stream(config, SystemStream("log", "in"), [("k", 5), ("k", 6)], partition=partition)
    time.sleep(0.05)
    instant = now_ms()
    time.sleep(0.05)
    for partition in range(4):
        write_stream(config, SystemStream("log", "in"), [("k", v) for v in (7, 8, 9)], partition=partition)
    seal(config, "in")

    set_startpoints(config, "log.in", StartpointSpecific("2"), partitions=[0])
    set_startpoints(config, "log.in", StartpointTimestamp(instant), partitions=[1])
    result = SparkJobRunner(config, spark=spark_local).run()

    assert result.outcome == "finished", result.error
    seen = counts(config)
    assert seen[0] == expected(range(2, 10))  # rewound to offset 2, inclusive
    assert seen[1] == expected(range(7, 10))  # fast-forwarded to the first record at/after the instant
    assert seen[2] == seen[3] == expected(range(5, 10))  # resumed after their checkpoints
    assert StartpointManager(metadata_store(config)).all_fan_outs() == {}


def test_oldest_and_upcoming_startpoints_move_only_their_partitions(spark_local, tmp_path):
    config = job_config(tmp_path, job__container__count=2)
    first_run_reads_half(spark_local, config)
    fill(config, "in", 4, 5, start=5)
    seal(config, "in")
    set_startpoints(config, "log.in", StartpointOldest(), partitions=[2])
    set_startpoints(config, "log.in", StartpointUpcoming(), partitions=[3])

    result = SparkJobRunner(config, spark=spark_local).run()

    assert result.outcome == "finished", result.error
    seen = counts(config)
    assert seen[0] == seen[1] == expected(range(5, 10))
    assert seen[2] == expected(range(0, 10))  # everything again
    assert seen[3] == expected(range(0))  # none of the records that existed when it started


def test_a_container_killed_before_its_first_commit_applies_the_startpoint_again(spark_local, tmp_path):
    config = job_config(
        tmp_path, task="tests.jobs:SlowPassThrough", test__delay__seconds=0.02, task__commit__ms=3_600_000
    )
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    fill(config, "in", 1, 40)
    seal(config, "in")
    first = SparkJobRunner(config, spark=spark_local).run()
    assert first.outcome == "finished", first.error
    set_startpoints(config, "log.in", StartpointSpecific("0"))

    store = metadata_store(config)
    runner = SparkJobRunner(config, spark=spark_local)
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", runner.run()))
    job.start()
    # the second run replays 40 messages from offset 0 in ~0.8 s and commits only at the end: kill it early
    status = wait_for(lambda: _running(store, generation=first.generation + 1), 60)
    time.sleep(0.3)
    assert checkpointed(config) == 40, "no commit may happen before the kill"
    os.kill(int(status["pid"]), signal.SIGKILL)
    job.join()

    result = outcome["result"]
    assert result.outcome == "finished", result.error
    assert result.containers[0].epoch >= 2  # the killed attempt was retried
    seen = counts(config)[0]
    # without the startpoint applied again, the retry would resume after offset 39 and output nothing
    assert all(seen[v] >= 2 for v in range(40)), seen
    assert StartpointManager(store).all_fan_outs() == {}


def _running(store, generation: int) -> dict | None:
    status = coordination.container_statuses(store).get("0", {})
    return status if status.get("state") == "running" and status.get("generation") == generation else None


def test_apply_restarts_a_running_job_with_the_new_startpoint(spark_local, tmp_path):
    config = job_config(tmp_path, task="tests.jobs:SlowPassThrough", test__delay__seconds=0.001)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 50)
    runner = SparkJobRunner(config, spark=spark_local)
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", runner.run()))
    job.start()
    wait_for(lambda: checkpointed(config) >= 100, 60)
    first_generation = runner.generation

    set_startpoints(config, "log.in", StartpointSpecific("10"), partitions=[0], apply=True)
    wait_for(lambda: runner.generation == first_generation + 1 and counts(config)[0][49] >= 2, 60)
    wait_for(lambda: checkpointed(config) >= 100, 60)  # the replay is committed before the stop
    runner.request_stop()
    job.join()

    result = outcome["result"]
    assert result.outcome == "stopped", result.error
    assert result.generation == first_generation + 1
    seen = counts(config)
    assert seen[0] == collections.Counter(list(range(50)) + list(range(10, 50)))
    assert seen[1] == collections.Counter(range(50))


def test_a_commit_requested_on_the_first_message_removes_the_startpoint_so_retries_do_not_replay(spark_local, tmp_path):
    config = job_config(tmp_path, task="tests.jobs:CommitsEachMessageFailsOnPoison", task__commit__ms=3_600_000)
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    write_stream(config, SystemStream("log", "in"), [("k", 0), ("k", 1), ("k", 2)])
    runner = SparkJobRunner(config, spark=spark_local)
    threading.Thread(
        target=lambda: runner.request_stop() if wait_for(lambda: checkpointed(config) >= 3, 60) else None
    ).start()
    assert runner.run().outcome == "stopped"
    set_startpoints(config, "log.in", StartpointSpecific("2"))
    write_stream(config, SystemStream("log", "in"), [("k", "poison")])

    failed = SparkJobRunner(config, spark=spark_local).run()
    assert failed.outcome == "failed" and "poison message at offset 3" in (failed.error or "")
    assert StartpointManager(metadata_store(config)).all_fan_outs() == {}
    # the first attempt replayed offset 2 from the startpoint and committed it; its retries resumed after it
    assert counts(config)[0][2] == 2

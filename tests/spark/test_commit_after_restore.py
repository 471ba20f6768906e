"""Through the Spark runner: a container SIGKILLed after its stores wrote to their changelog, with no
checkpoint yet (its object cache, smaller than its keys, wrote back what it evicted), is retried; its
restore reverts those writes and it commits at once, sealing the revert, long before the timer (an hour)
or the end of its input would have."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.contracts import coordination
from millstream.coordinator.job_result import JobResult
from millstream.model import SystemStream, SystemStreamPartition, TaskName
from millstream.spark.run.runner import SparkJobRunner
from millstream.testing import read_stream
from tests.helpers import wait_until
from tests.spark.test_state import PER_PARTITION, final_store_dumps, job, reference

pytestmark = pytest.mark.spark

TASK = TaskName("Partition 0")


def test_a_retried_container_whose_restore_reverted_writes_commits_before_reaching_its_inputs_end(
    spark_local: Any, tmp_path: Path
) -> None:
    config = job(
        tmp_path,
        "changelog",
        task__commit__ms=3_600_000,
        test__delay__seconds=0.006,
        stores__counts__object__cache__size=3,  # fewer than the keys: evictions reach the changelog before a commit
        stores__counts__write__batch__size=2,
    )
    store = metadata_store(config)
    runner = SparkJobRunner(config, spark=spark_local)
    outcome: dict[str, JobResult] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("result", runner.run()))
    thread.start()

    def counted_some_of_partition_0() -> int | None:
        out = read_stream(config, SystemStream("log", "out"), idle_timeout=0.2).get(0, [])
        status = coordination.container_statuses(store).get("0", {})
        if status.get("state") == "running" and sum(1 for _, v in out if v.get("p") == 0) >= 40:
            return int(status["pid"])
        return None

    victim = wait_until(counted_some_of_partition_0, 120, "container 0 counted part of partition 0")
    assert TASK not in checkpoint_manager(config, store).read_all(), "no checkpoint before the kill"
    assert victim is not None
    os.kill(victim, signal.SIGKILL)

    # The first checkpoint the task writes is read alone (one metadata read per poll, nothing else), so a
    # loaded machine cannot let the poll miss it; it must name no input offset near the partition's end.
    checkpoints = checkpoint_manager(config, store)
    first = wait_until(lambda: checkpoints.read_all().get(TASK), 120, "a checkpoint of the retried task")
    assert first is not None
    processed = first.offsets.get(SystemStreamPartition("log", "in", 0))
    assert processed is None or int(processed) < PER_PARTITION - 1, f"first checkpoint at the input's end: {first}"
    thread.join(300)
    result = outcome["result"]
    assert result.outcome == "finished", result.error
    assert max(c.epoch for c in result.containers) >= 2
    assert final_store_dumps(config) == reference()

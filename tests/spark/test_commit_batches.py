"""Through the Spark runner, a job of many tasks per container: their checkpoints, written in batches by each
container's group commit, name every task's last offset, and a restart resumes each task exactly there."""

from __future__ import annotations

import collections
import threading

import pytest

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.model import SystemStreamPartition, TaskName
from millstream.spark.run.runner import SparkJobRunner
from tests.helpers import create_stream, fill, job_config, output_origins, seal
from tests.spark.run.test_runner import wait_for

pytestmark = pytest.mark.spark

PARTITIONS = 48
PER_RUN = 5


def checkpointed_offsets(config) -> dict[TaskName, dict[SystemStreamPartition, str | None]]:
    return {task: dict(c.offsets) for task, c in checkpoint_manager(config, metadata_store(config)).read_all().items()}


def every_task_at(offset: int) -> dict[TaskName, dict[SystemStreamPartition, str | None]]:
    return {TaskName(f"Partition {p}"): {SystemStreamPartition("log", "in", p): str(offset)} for p in range(PARTITIONS)}


def test_every_task_of_a_many_task_job_is_checkpointed_and_a_restart_resumes_each_exactly(spark_local, tmp_path):
    config = job_config(tmp_path, job__container__count=2, task__commit__ms=100)
    create_stream(config, "in", PARTITIONS)
    create_stream(config, "out", 1)
    fill(config, "in", PARTITIONS, PER_RUN)
    runner = SparkJobRunner(config, spark=spark_local)
    first_half = every_task_at(PER_RUN - 1)

    def stop_once_checkpointed() -> None:
        try:
            wait_for(lambda: checkpointed_offsets(config) == first_half, 120)
        finally:
            runner.request_stop()

    threading.Thread(target=stop_once_checkpointed).start()
    assert runner.run().outcome == "stopped"
    assert checkpointed_offsets(config) == first_half

    fill(config, "in", PARTITIONS, PER_RUN, start=PER_RUN)
    seal(config, "in")
    result = SparkJobRunner(config, spark=spark_local).run()

    assert result.outcome == "finished", result.error
    assert checkpointed_offsets(config) == every_task_at(2 * PER_RUN - 1)
    seen = collections.Counter(output_origins(config))
    assert seen == {(p, v): 1 for p in range(PARTITIONS) for v in range(2 * PER_RUN)}, "a message lost or repeated"

"""Which task attempt runs each container of a job group now, read from Spark's status store: where the driver
records placements (``affinity``) and which attempt its liveness check kills (``liveness``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark import SparkContext


@dataclass(frozen=True)
class RunningTask:
    task_id: int
    executor_id: str
    host: str


def running_tasks(sc: SparkContext, group: str) -> dict[int, RunningTask]:
    """The running task attempt of each container (by Spark partition index) of the jobs of ``group``; raises
    what py4j raises while the status store does not know a stage yet (callers try again at their next poll)."""
    tracker = sc.statusTracker()
    status_store: Any = sc._jsc.sc().statusStore()
    running: dict[int, RunningTask] = {}
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            if stage is None:
                continue
            tasks = status_store.taskList(stage_id, stage.currentAttemptId, 1_000_000)
            for position in range(tasks.size()):
                task = tasks.apply(position)
                if task.status() == "RUNNING":
                    running[int(task.index())] = RunningTask(
                        int(task.taskId()), str(task.executorId()), str(task.host())
                    )
    return running

"""What runs inside a Spark task: one millstream container, start to finish.

Pickled by reference and executed in a Python worker on an executor; it only needs millstream (and
the user's task module) importable there. The driver's source directories are added to ``sys.path``
when they exist on the worker, so jobs defined next to their config run in local mode and on a
single-host cluster without packaging; a real cluster ships code with ``--py-files`` as usual.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from millstream.config.secrets import mask_secrets_in_logs
from millstream.config.settings import Settings
from millstream.job_model import JobModel
from millstream.log_context import configure_logging
from millstream.runtime.container import Container

log = logging.getLogger("millstream.spark.container_task")
"""Named as before the runner moved to ``spark/run/``: users' log filters and alerts match this name on the
line each container logs when it starts."""


def container_partition(
    config_items: dict[str, str],
    config_source: str | None,
    model_bytes: bytes,
    python_paths: Sequence[str],
    log_level: str,
    index: int,
    _rows: Iterator[Any],
) -> Iterator[bytes]:
    """Run container ``index`` (the Spark partition index is the container id) and yield its result.

    ``log_level`` is the driver's choice (``millstream run`` without ``-v``: warnings only), passed along
    because an executor on a cluster does not share the driver's environment."""
    for path in reversed(python_paths):
        if path not in sys.path and os.path.isdir(path):
            sys.path.insert(0, path)
    config = Settings(config_items, config_source)
    configure_logging(log_level, job=config.job.name, container=str(index))
    mask_secrets_in_logs(config)
    executor = _executor_info()
    log.info(
        "container %s runs as Spark task %s (stage %s, partition %s, attempt %s)",
        index,
        executor.get("task_attempt_id", "-"),
        executor.get("stage", "-"),
        executor.get("partition", "-"),
        executor.get("spark_attempt", "-"),
    )
    result = Container(config, JobModel.from_bytes(model_bytes), str(index), executor=executor).run()
    yield orjson.dumps(dataclasses.asdict(result))


def _executor_info() -> dict[str, Any]:
    from pyspark import TaskContext

    context = TaskContext.get()
    info: dict[str, Any] = {"worker_pid": os.getpid(), "executor_pid": os.getppid(), "cwd": os.getcwd()}
    if context is not None:
        info.update(
            stage=context.stageId(),
            partition=context.partitionId(),
            spark_attempt=context.attemptNumber(),
            task_attempt_id=context.taskAttemptId(),
            cpus=context.cpus(),
        )
    return info

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

from millstream.config import Config
from millstream.job_model import JobModel
from millstream.runtime.container import Container


def container_partition(
    config_items: dict[str, str],
    config_source: str | None,
    model_bytes: bytes,
    python_paths: Sequence[str],
    index: int,
    _rows: Iterator[Any],
) -> Iterator[bytes]:
    for path in reversed(python_paths):
        if path not in sys.path and os.path.isdir(path):
            sys.path.insert(0, path)
    logging.basicConfig(
        level=os.environ.get("MILLSTREAM_LOG_LEVEL", "INFO"),
        format=f"%(asctime)s %(levelname)s [container {index}] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    config = Config(config_items, config_source)
    result = Container(config, JobModel.from_bytes(model_bytes), str(index), executor=_executor_info()).run()
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
        )
    return info

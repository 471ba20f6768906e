"""Through the Spark runner, a container (in a Python worker) runs its tasks with its start-up heap frozen out of
the cyclic garbage collector (``millstream/runtime/heap.py``)."""

from __future__ import annotations

from pathlib import Path

from millstream.model import SystemStream
from millstream.spark.run.runner import SparkJobRunner
from millstream.testing import read_stream
from tests.helpers import create_stream, fill, job_config, output_origins, seal


def test_containers_in_spark_workers_process_every_message_with_their_start_up_heap_frozen(
    spark_local, tmp_path: Path
) -> None:
    config = job_config(
        tmp_path, "tests.jobs:ReportsFrozenHeap", job__container__count=2, job__container__gc__freeze__min__tasks=2
    )
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    written = fill(config, "in", 4, 25)
    seal(config, "in")

    result = SparkJobRunner(config, spark=spark_local).run()

    assert result.outcome == "finished", result.error
    origins = output_origins(config)
    assert set(origins) == written
    assert len(origins) == len(written)
    values = [value for pairs in read_stream(config, SystemStream("log", "out")).values() for _, value in pairs]
    assert min(value["frozen"] for value in values) > 0, "a container ran a task with nothing frozen"

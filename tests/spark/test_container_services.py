"""Through the Spark runner, a container (in a Python worker) opens one admin per system and the documented
metadata-store connections: the counting seams of ``tests.runtime.counting`` append what each process opens to
a file, and the worker's lines are the container's."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from millstream.spark.run.runner import SparkJobRunner
from tests.runtime.test_services import counted_job


def test_a_container_in_a_spark_worker_opens_one_admin_per_system_and_two_store_connections(
    spark_local, tmp_path: Path
) -> None:
    count_file = tmp_path / "opened.txt"
    config = counted_job(tmp_path, test__count__file=count_file, job__container__count=1)

    result = SparkJobRunner(config, spark=spark_local).run()

    assert result.outcome == "finished", result.error
    assert result.messages == 30
    driver = str(os.getpid())
    lines = [line.split(" ", 1) for line in count_file.read_text().splitlines()]
    in_workers = Counter(what for pid, what in lines if pid != driver)
    assert in_workers == Counter({"admin log": 1, "store": 2}), in_workers

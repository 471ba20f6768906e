"""A job whose 64 input and 64 output partitions pass through pools of 8 open files, through the Spark runner:
every message copied exactly once and every partition's offsets checkpointed (issue 36: the embedded log holds
more partitions than it keeps open)."""

from __future__ import annotations

import pytest

from millstream.spark.run.runner import SparkJobRunner
from tests.helpers import checkpointed_offsets, create_stream, fill, job_config, output_origins, seal

pytestmark = pytest.mark.spark

PARTITIONS = 64
PER_PARTITION = 10


def test_a_job_over_64_partitions_through_pools_of_8_copies_every_message_once_and_checkpoints_each_end(
    spark_local, tmp_path
):
    config = job_config(
        tmp_path,
        job__container__count=2,
        task__commit__ms=60_000,
        systems__log__consumer__open__partitions__max=8,
        systems__log__producer__open__partitions__max=8,
        systems__log__admin__open__partitions__max=8,
    )
    create_stream(config, "in", PARTITIONS)
    create_stream(config, "out", PARTITIONS)
    written = fill(config, "in", PARTITIONS, PER_PARTITION)
    seal(config, "in")

    result = SparkJobRunner(config, spark=spark_local).run()

    assert result.outcome == "finished", result.error
    origins = output_origins(config)
    assert sorted(origins) == sorted(written), "duplicates or losses"
    assert checkpointed_offsets(config, "in", PARTITIONS) == {
        partition: str(PER_PARTITION - 1) for partition in range(PARTITIONS)
    }

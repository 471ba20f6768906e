"""A job over many input partitions through the Spark runner: every message processed exactly once, every
partition's offsets checkpointed at its end (issue 36: per-partition cost)."""

from __future__ import annotations

import pytest

from millstream.spark.run.runner import SparkJobRunner
from tests.helpers import checkpointed_offsets, create_stream, fill, job_config, output_origins, seal

pytestmark = pytest.mark.spark

PARTITIONS = 256


def test_a_job_over_256_partitions_processes_every_message_once_and_checkpoints_each_partitions_end(
    spark_local, tmp_path
):
    """Half the partitions hold messages and half are empty and quiet, so the consumer's quiet partitions must
    still see their end-of-stream for the job to finish."""
    config = job_config(tmp_path, job__container__count=2, task__commit__ms=60_000)
    create_stream(config, "in", PARTITIONS)
    create_stream(config, "out", 4)
    written = fill(config, "in", PARTITIONS // 2, 12)
    seal(config, "in")

    result = SparkJobRunner(config, spark=spark_local).run()

    assert result.outcome == "finished", result.error
    origins = output_origins(config)
    assert len(origins) == len(written)
    assert set(origins) == written
    assert checkpointed_offsets(config, "in", PARTITIONS) == {
        partition: "11" if partition < PARTITIONS // 2 else None for partition in range(PARTITIONS)
    }

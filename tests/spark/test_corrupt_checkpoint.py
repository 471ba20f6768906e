"""A corrupt checkpoint record under the Spark runner: the container (and each of Spark's retries) fails
naming the task and the record, and the job fails with that — it never starts the task again from the
beginning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from millstream.checkpoint.metadata_store import CHECKPOINT_V1_NAMESPACE
from millstream.composition.metadata import metadata_store
from millstream.spark.run.runner import SparkJobRunner
from tests.helpers import create_stream, fill, job_config, output_origins, seal

pytestmark = pytest.mark.spark


def test_a_corrupt_checkpoint_fails_every_attempt_naming_the_task_and_nothing_is_processed_again(
    spark_local: Any, tmp_path: Path
) -> None:
    config = job_config(tmp_path)
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    fill(config, "in", 1, 50)
    seal(config, "in")
    assert SparkJobRunner(config, spark=spark_local).run().outcome == "finished"
    with metadata_store(config) as store:
        store.put(CHECKPOINT_V1_NAMESPACE, "Partition 0", b"{not json")
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "failed"
    assert "checkpoint (version 1) of task 'Partition 0' in the metadata store" in (result.error or ""), result.error
    assert "task.checkpoint.validation.enabled=false" in (result.error or "")
    assert len(output_origins(config)) == 50, "the task started again from the beginning"

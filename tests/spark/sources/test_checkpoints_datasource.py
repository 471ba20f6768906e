"""Format ``millstream-checkpoints`` on Spark local mode: the checkpoints a job resumes from, as rows."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from pyspark.errors import PySparkException

from millstream.checkpoint.checkpoint import CheckpointId
from millstream.testing import InProcessRunner
from tests.helpers import create_stream, fill, job_config, seal

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("read_versions", ["1", "2,1"])
def test_every_task_partition_is_a_row_with_the_checkpoint_the_job_resumes_from(
    spark_local, tmp_path: Path, read_versions: str
):
    """Jobs write V1 and V2 and resume from the first of ``task.checkpoint.read.versions``: that is the row."""
    config = job_config(tmp_path, task__checkpoint__read__versions=read_versions)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 3)
    seal(config, "in")
    started_ms = int(time.time() * 1000)
    assert InProcessRunner(config).run(timeout=60).outcome == "finished"
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump(dict(config.items())), encoding="utf-8")

    rows = spark_local.read.format("millstream-checkpoints").option("config", str(config_file)).load().collect()

    assert [(r.task, r.system, r.stream, r.partition, r.offset) for r in sorted(rows, key=lambda r: r.partition)] == [
        ("Partition 0", "log", "in", 0, "2"),
        ("Partition 1", "log", "in", 1, "2"),
    ]
    for row in rows:
        assert row.version == int(read_versions[0])
        if row.version == 1:
            assert (row.checkpoint_id, row.time) == (None, None)
        else:
            assert CheckpointId.parse(row.checkpoint_id).millis >= started_ms
            assert row.time.timestamp() * 1000 >= started_ms


def test_the_config_option_is_required(spark_local):
    with pytest.raises(PySparkException, match="option 'config'"):
        spark_local.read.format("millstream-checkpoints").load().collect()

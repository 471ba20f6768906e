"""The changelog backend's corrupt-local-checkpoint fallback through the Spark runner (local mode: the
executors use this host's store directories, as a restarted executor on the same host would). The
blob-store check is covered in-process: this job's files are small enough that a size-and-checksum
mismatch was always caught, and only the large-file case changed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millstream.config.settings import Settings
from millstream.spark.run.runner import SparkJobRunner
from tests.helpers import fill, seal
from tests.storage.test_corrupt_local_checkpoints import corrupt_ssts, local_checkpoint_dirs
from tests.storage.test_stateful_jobs import config_for, final_stores, prepare, read_everything, reference

pytestmark = pytest.mark.spark


def run_on_spark_until_read(config: Settings, spark: SparkSession, total: int) -> None:
    runner = SparkJobRunner(config, spark=spark)

    def stopper() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not read_everything(config, total):
            time.sleep(0.1)
        runner.request_stop()

    threading.Thread(target=stopper, daemon=True).start()
    result = runner.run()
    assert result.outcome == "stopped", result.error


def test_on_spark_corrupt_local_ssts_fall_back_to_the_changelog_and_the_state_stays_exact(
    spark_local: SparkSession, tmp_path: Path
) -> None:
    config = config_for(tmp_path, "changelog")
    written = prepare(config)
    run_on_spark_until_read(config, spark_local, 120)
    damaged = local_checkpoint_dirs(config)
    assert len(damaged) == 2
    for directory in damaged:
        corrupt_ssts(directory)
    written |= fill(config, "in", 2, 40, start=60)
    seal(config, "in")
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "finished", result.error
    assert final_stores(config) == reference(written) == {"k0": 100, "k1": 100}
    for directory in damaged:
        assert not directory.exists()

"""Through the Spark runner: a container of a superseded run that keeps running (held while a second run
of the job took over, then released) writes nothing the newer run's checkpoints cover. Its changelog
appends are refused, it hands over as superseded, and a restore gives exactly the fault-free counts."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from millstream.coordinator.job_result import JobResult
from millstream.spark.run.runner import SparkJobRunner
from millstream.testing import InProcessRunner
from tests.api.test_in_process import run_in_background
from tests.helpers import seal, wait_until
from tests.runtime.test_zombie_attempts import KEYS, checkpointed_offset, reported_stores, write_keys, zombie_job

pytestmark = pytest.mark.spark


def test_a_superseded_spark_container_that_keeps_processing_leaves_the_restored_state_exact(
    spark_local: Any, tmp_path: Path
) -> None:
    config = zombie_job(tmp_path, "rocksdb", records=200, hold_at=100, commit_at=150)
    first: dict[str, JobResult] = {}
    spark_run = threading.Thread(
        target=lambda: first.setdefault("result", SparkJobRunner(config, spark=spark_local).run())
    )
    spark_run.start()
    wait_until(lambda: (tmp_path / "hold" / "held").exists(), 120, "the Spark container held at offset 100")

    _runner, thread, results = run_in_background(config)
    wait_until(lambda: checkpointed_offset(config) == 199 or not thread.is_alive(), 60, "the second run at 199")
    (tmp_path / "hold" / "release").touch()
    spark_run.join(120)
    assert not spark_run.is_alive(), "the superseded Spark run did not end"
    assert first["result"].outcome == "superseded", first["result"].error

    write_keys(config, range(200, 205), key="late")
    wait_until(lambda: checkpointed_offset(config) == 204 or not thread.is_alive(), 60, "the second run at 204")
    seal(config, "in")
    thread.join(60)
    assert results["result"].outcome == "finished", results["result"].error

    assert InProcessRunner(config).run(timeout=60).outcome == "finished"  # restores, reports its store
    *_, restored = reported_stores(config)
    assert restored == dict(Counter(f"k{value % KEYS}" for value in range(200)) | Counter({"late": 5}))

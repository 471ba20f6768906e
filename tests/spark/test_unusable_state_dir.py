"""The unusable state directory through the Spark runner: the next commit that makes the store's local
checkpoint fails naming the store and the directory, Spark's retries fail restoring it (naming the task, the
store and the path), the job fails with that, and a rerun after the repair restores the exact state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from millstream.spark.run.runner import SparkJobRunner
from tests.storage.test_unusable_state_dir import break_the_state_dir_then_repair_it

pytestmark = pytest.mark.spark


def test_on_spark_a_state_directory_gone_mid_run_fails_naming_it_and_a_rerun_restores_exactly(
    spark_local: Any, tmp_path: Path
) -> None:
    break_the_state_dir_then_repair_it(tmp_path, lambda config: SparkJobRunner(config, spark=spark_local).run())

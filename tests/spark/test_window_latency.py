"""As ``tests/api/test_window_latency.py``, through the Spark runner: a ``partition_by`` → tumbling window job
whose watermark timer never ticks during the test still fires the window once the watermark passed its end."""

from __future__ import annotations

import pytest

from millstream.spark.run.runner import SparkJobRunner
from tests.api.test_window_latency import assert_the_first_window_fires_without_a_timer_tick, prompt_window_app

pytestmark = pytest.mark.spark


def test_a_window_fires_through_spark_when_the_watermark_passes_its_end_without_a_timer_tick(spark_local, tmp_path):
    config = prompt_window_app(tmp_path)
    runner = SparkJobRunner(config, spark=spark_local)
    assert_the_first_window_fires_without_a_timer_tick(config, runner, runner.run)

"""Output is visible within milliseconds, not at the next checkpoint: with ``task.commit.ms`` at ten minutes,
a running job's output (pass-through and a stateful count with a changelog) is readable on the embedded log
while no checkpoint exists yet. The producers write what they held back for batching once it waited
``producer.linger.ms``, between batches of the run loop, or at once when the loop finds no input waiting: with
a linger of ten minutes too, the output is still readable long before either."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.coordinator.job_result import JobResult
from millstream.model import SystemStream
from millstream.testing import InProcessRunner, read_stream
from tests.helpers import create_stream, fill, job_config, wait_until
from tests.storage.harness import state_config

TEN_MINUTES = "600000"


def no_checkpoint_yet(config: Settings) -> bool:
    with metadata_store(config) as store:
        return not checkpoint_manager(config, store).read_all()


def output_count(config: Settings) -> int:
    return len(read_stream(config, SystemStream("log", "out"))[0])


def visible_before_any_checkpoint(config: Settings, run: Callable[[], JobResult], stop: Callable[[], None]) -> None:
    """Run the job in the background, wait until all 100 inputs reached its output, then stop it."""
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    fill(config, "in", 2, 50)
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("result", run()), daemon=True)
    thread.start()
    try:
        wait_until(lambda: output_count(config) >= 100 or not thread.is_alive(), 120, "100 outputs readable")
        assert output_count(config) == 100, outcome
        assert no_checkpoint_yet(config)  # visible long before the first checkpoint (ten minutes away)
    finally:
        stop()
        thread.join(120)
    assert outcome["result"].outcome == "stopped", outcome["result"].error


@pytest.mark.parametrize("kind", ["pass-through", "stateful", "pass-through lingering ten minutes"])
def test_output_is_readable_long_before_the_first_checkpoint(tmp_path: Path, kind: str) -> None:
    if kind == "pass-through":
        config = job_config(tmp_path, task__commit__ms=TEN_MINUTES)
    elif kind == "stateful":
        config = state_config(tmp_path, "changelog", task__commit__ms=TEN_MINUTES)
    else:  # only the drained input can send the held output before the test gives up
        config = job_config(tmp_path, task__commit__ms=TEN_MINUTES, systems__log__producer__linger__ms=TEN_MINUTES)
    runner = InProcessRunner(config)
    visible_before_any_checkpoint(config, lambda: runner.run(timeout=300), runner.request_stop)


@pytest.mark.spark
def test_output_is_readable_long_before_the_first_checkpoint_through_the_spark_runner(
    spark_local: Any, tmp_path: Path
) -> None:
    from millstream.spark.run.runner import SparkJobRunner

    config = job_config(
        tmp_path,
        task__commit__ms=TEN_MINUTES,
        systems__log__producer__linger__ms=TEN_MINUTES,  # sent once a container's input is drained
        job__container__count=2,
    )
    runner = SparkJobRunner(config, spark=spark_local)
    visible_before_any_checkpoint(config, runner.run, runner.request_stop)

"""Session windows, stream-stream joins and keyed state through the Spark runner: the output equals a
plain-Python reference, and a container SIGKILLed after committing operator state resumes from it."""

from __future__ import annotations

import pytest

from millstream.spark.run.runner import SparkJobRunner
from tests.api.apps import (
    app_config,
    assert_running_counts_are_exact,
    reference_stateful,
    stateful_records,
    user_messages,
)
from tests.spark.test_application import output, setup
from tests.spark.test_state import paused_at, run_and_kill

pytestmark = pytest.mark.spark

APP = "tests.api.apps:SessionsJoinAndCounts"


def test_sessions_a_stream_join_and_keyed_state_equal_the_plain_python_reference(spark_local, tmp_path):
    config = app_config(tmp_path, APP, job__container__count=2)
    data = {p: user_messages(p, 40) for p in range(2)}
    setup(config, data)
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "finished", result.error
    values = output(config)
    assert stateful_records(values) == reference_stateful(data)
    assert_running_counts_are_exact(values)
    kinds = {value["kind"] for value in values}
    assert kinds == {"session", "running", "join"}


def test_operator_state_survives_a_container_sigkilled_after_a_checkpoint(spark_local, tmp_path):
    """The container is killed while paused right after a commit's checkpoint, so nothing it wrote lies past
    its checkpoint: intermediate streams are at-least-once, and a kill between a commit's flush and its
    checkpoint would have an upstream task send again what a downstream operator already counted."""
    markers = tmp_path / "markers"
    config = app_config(
        tmp_path,
        APP,
        job__container__count=2,
        task__commit__ms=1000,
        test__delay__seconds=0.04,
        task__commit__testing__pause__at="after-checkpoint",
        task__commit__testing__pause__ms=60_000,
        task__commit__testing__marker__dir=str(markers),
        # output waits for the commit, however idle the input, so nothing the container sends while its checkpoint
        # is written lies past it (at-least-once: what lingered out after a checkpoint is sent again after the kill,
        # and counted twice downstream; exactly-once is what rules that out)
        systems__log__producer__linger__ms=600_000,
        systems__log__producer__linger__when__drained=True,
    )
    data = {p: user_messages(p, 60) for p in range(2)}
    setup(config, data)
    result = run_and_kill(config, spark_local, paused_at(markers, "after-checkpoint"))
    assert result.outcome == "finished", result.error
    assert max(c.epoch for c in result.containers) >= 2, "no container was restarted"
    values = output(config)
    assert stateful_records(values) == reference_stateful(data)
    assert_running_counts_are_exact(values)

"""Session windows, stream-stream joins and keyed state through the Spark runner: the output equals a
plain-Python reference, and a container SIGKILLed after committing operator state resumes from it."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

from millstream.checkpoint.factory import checkpoint_manager
from millstream.config import Config
from millstream.coordinator.job_result import JobResult
from millstream.metadata import coordination
from millstream.metadata.factory import metadata_store
from millstream.model import TaskName
from millstream.spark.runner import SparkJobRunner
from tests.api.apps import (
    app_config,
    assert_running_counts_are_exact,
    reference_stateful,
    stateful_records,
    user_messages,
)
from tests.api.state_probe import committed_operators, persisted_control_states
from tests.spark.test_application import output, setup, wait_for

pytestmark = pytest.mark.spark

APP = "tests.api.apps:SessionsJoinAndCounts"
STATEFUL = ("running", "sessions", "pairs")


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


def test_operator_state_survives_a_sigkilled_container(spark_local, tmp_path):
    config = app_config(tmp_path, APP, job__container__count=2, task__commit__ms=100, test__delay__seconds=0.04)
    data = {p: user_messages(p, 60) for p in range(2)}
    setup(config, data)
    store = metadata_store(config)
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", SparkJobRunner(config, spark=spark_local).run()))
    job.start()
    victim = wait_for(lambda: _committed_operator_state(config, store, "Partition 0"), 120)
    os.kill(victim, signal.SIGKILL)
    job.join()

    result = outcome["result"]
    assert result.outcome == "finished", result.error
    container = coordination.latest_job_model(store).container_of(TaskName("Partition 0"))  # type: ignore[union-attr]
    assert {c.container_id: c.epoch for c in result.containers}[container] >= 2, "the container was restarted"
    values = output(config)
    assert stateful_records(values) == reference_stateful(data)
    assert_running_counts_are_exact(values)


def _committed_operator_state(config: Config, store: Any, task: str) -> int | None:
    """The pid of the running container of ``task`` once a commit of it holds keyed, session and join
    state (in its operator store's changelog) and a checkpoint, while its input is not finished; else None."""
    state = persisted_control_states(config).get(task)
    if state is None or any(state["operators"].get(op, {}).get("ended") for op in STATEFUL):
        return None
    if not committed_operators(config).get(task, set()) >= set(STATEFUL):
        return None
    if checkpoint_manager(config, store).read_all().get(TaskName(task)) is None:
        return None
    model = coordination.latest_job_model(store)
    if model is None:
        return None
    status = coordination.container_statuses(store).get(model.container_of(TaskName(task)), {})
    return int(status["pid"]) if status.get("state") == "running" else None

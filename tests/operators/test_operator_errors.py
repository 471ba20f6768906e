"""A user function of a high-level operator that raises is a failure of its message, as a task's own exception
is: ``task.process.errors`` fails the job naming the task, stream, partition, offset and operator, skips the
message, or dead-letters it; and the same failure twice is a deterministic failure, not retried forever."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from millstream.api.application import (
    InputDescriptor,
    OutputDescriptor,
    StreamApplication,
    StreamApplicationDescriptor,
)
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.model import SystemStream
from millstream.testing import InProcessRunner, iter_stream, read_stream, write_stream
from tests.api.apps import app_config
from tests.helpers import create_stream, seal

FAILING = frozenset({3, 7})


def checked(message: dict[str, Any]) -> dict[str, Any]:
    if message["n"] in FAILING:
        raise ValueError(f"cannot handle {message['n']}")
    return {"n": message["n"], "checked": True}


class FailingMap(StreamApplication):
    """``in`` → map(checked) → ``out``; ``checked`` raises for the values of ``FAILING``."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        app.input(InputDescriptor("log.in", key_serde="string", msg_serde="json")).map(checked, name="check").send_to(
            OutputDescriptor("log.out", key_serde="string", msg_serde="json")
        )


def failing_app(tmp_path: Path, **extra: Any) -> Settings:
    config = app_config(tmp_path, f"{__name__}:FailingMap", **extra)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    create_stream(config, "dead", 1)
    for partition in range(2):
        write_stream(config, SystemStream("log", "in"), [(str(n), {"n": n}) for n in range(10)], partition=partition)
    seal(config, "in")
    return config


def outputs(config: Settings) -> list[int]:
    return sorted(
        value["n"] for values in read_stream(config, SystemStream("log", "out")).values() for _, value in values
    )


def test_a_raising_operator_fails_the_job_naming_task_partition_offset_and_operator(tmp_path):
    config = failing_app(tmp_path, job__container__retry__count=3)
    result = InProcessRunner(config).run(timeout=120)
    assert result.outcome == "failed"
    error = result.error or ""
    assert "failed processing offset 3 of stream 'log.in' partition" in error, error
    assert "operator 'check' failed: ValueError: cannot handle 3" in error, error


def test_a_raising_operator_is_recorded_as_a_failure_of_user_code_at_its_message(tmp_path):
    """The record the driver compares attempts by: a repeat of it is a deterministic failure."""
    config = failing_app(tmp_path)
    result = InProcessRunner(config).run(timeout=120)
    assert result.outcome == "failed"
    with metadata_store(config) as store:
        record = coordination.container_failures(store)["0"]
    assert (record["stream"], record["offset"], record["type"], record["count"]) == (
        "log.in",
        "3",
        "OperatorError",
        1,
    ), record


@pytest.mark.parametrize("mode", ["skip", "dead-letter"])
def test_under_skip_or_dead_letter_only_the_raising_messages_are_left_out(tmp_path, mode):
    config = failing_app(tmp_path, task__process__errors=mode, task__dead__letter__stream="log.dead")
    result = InProcessRunner(config).run(timeout=120)
    assert result.outcome == "finished", result.error
    assert outputs(config) == sorted(n for n in range(10) for _ in range(2) if n not in FAILING)
    assert sum(container.skipped_process_errors for container in result.containers) == 4
    dead = [envelope for _, batch in iter_stream(config, SystemStream("log", "dead")) for envelope in batch]
    if mode == "dead-letter":
        assert sorted(envelope.key for envelope in dead) == [b"3", b"3", b"7", b"7"]
        assert {(envelope.headers or {})["millstream.error.type"] for envelope in dead} == {b"OperatorError"}
    else:
        assert dead == []

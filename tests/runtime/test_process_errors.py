"""``task.process.errors``: a user exception fails the container naming the message, or is skipped, or
sends the message's original bytes to the dead-letter stream with where it came from and what was raised."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from millstream.config.settings import Settings
from millstream.coordinator.prepare import prepare
from millstream.errors import ConfigError
from millstream.model import SystemStream
from millstream.testing import InProcessRunner, iter_stream
from tests.helpers import create_stream, fill, job_config, output_origins, seal

FAILING = "tests.jobs:FailingOnSome"


def failing_job(tmp_path: Path, **extra: Any) -> tuple[Settings, set[tuple[int, int]]]:
    config = prepare(job_config(tmp_path, task=FAILING, **{"test__fail__values": "3,7", **extra}))
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    create_stream(config, "dead", 1)
    written = fill(config, "in", 2, 10)
    seal(config, "in")
    return config, written


def test_by_default_a_raising_task_fails_naming_task_stream_partition_offset_and_the_users_traceback(tmp_path):
    config, _ = failing_job(tmp_path)
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "failed"
    error = result.error or ""
    assert re.search(r"task 'Partition (\d)' failed processing offset 3 of stream 'log\.in' partition \1: ", error)
    assert "ValueError: cannot handle 3" in error
    assert "Traceback (most recent call last)" in error and 'tests/jobs.py", line' in error


def test_skip_goes_on_past_the_failing_messages_and_counts_them(tmp_path):
    config, written = failing_job(tmp_path, task__process__errors="skip")
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    assert sorted(output_origins(config)) == sorted(w for w in written if w[1] not in (3, 7))
    assert sum(container.skipped_process_errors for container in result.containers) == 4


def test_dead_letter_keeps_the_original_bytes_with_headers_naming_where_and_what(tmp_path):
    config, _ = failing_job(tmp_path, task__process__errors="dead-letter", task__dead__letter__stream="log.dead")
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    dead = [envelope for _, batch in iter_stream(config, SystemStream("log", "dead")) for envelope in batch]
    assert sorted(envelope.message for envelope in dead) == [b"3", b"3", b"7", b"7"]
    sevens = [envelope.headers or {} for envelope in dead if envelope.message == b"7"]
    headers = {found["millstream.error.partition"]: found for found in sevens}
    first = headers[b"0"]
    assert (first["millstream.error.task"], first["millstream.error.stream"], first["millstream.error.offset"]) == (
        b"Partition 0",
        b"log.in",
        b"7",
    )
    assert (first["millstream.error.type"], first["millstream.error.message"]) == (b"ValueError", b"cannot handle 7")
    assert first["millstream.error.traceback.digest"] == headers[b"1"]["millstream.error.traceback.digest"]


def test_dead_letter_without_a_dead_letter_stream_is_refused_at_start(tmp_path):
    with pytest.raises(ConfigError, match=r"task\.process\.errors' is 'dead-letter': set task\.dead\.letter\.stream"):
        prepare(job_config(tmp_path, task=FAILING, task__process__errors="dead-letter"))


@pytest.mark.parametrize(("mode", "outcome"), [("fail", "failed"), ("skip", "finished")])
def test_a_raising_window_follows_the_same_policy(tmp_path, mode, outcome):
    config, _ = failing_job(
        tmp_path,
        task__process__errors=mode,
        task__window__ms=10,
        test__fail__values="",
        test__fail__window="true",
        test__delay__seconds=0.01,
    )
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == outcome
    if mode == "fail":
        assert re.search(r"task 'Partition \d': window\(\) raised RuntimeError: window broke", result.error or "")
    else:
        assert sum(container.skipped_process_errors for container in result.containers) > 0

"""``task.processing.guarantee=exactly-once`` is refused before a job starts when what a commit covers cannot
be written in one Kafka transaction; each refusal names the key to change."""

from __future__ import annotations

from typing import Any

import pytest

from millstream.config import Config
from millstream.config.settings import Settings
from millstream.coordinator.prepare import prepare
from millstream.errors import ConfigError


def eos(**extra: Any) -> Config:
    values = {
        "job.name": "eos",
        "task.class": "tests.jobs:PassThrough",
        "task.inputs": "kafka.in",
        "task.processing.guarantee": "exactly-once",
        "task.checkpoint.factory": "kafka",
        "systems.kafka.samza.factory": "kafka",
        "systems.kafka.bootstrap.servers": "127.0.0.1:9",
    }
    values.update({key.replace("__", "."): str(value) for key, value in extra.items()})
    return Settings(values)


def test_an_exactly_once_job_with_everything_on_one_kafka_system_is_accepted() -> None:
    config = prepare(eos(stores__counts__changelog="kafka.counts-changelog", task__dead__letter__stream="kafka.dlq"))
    assert config.task.exactly_once


def test_exactly_once_commits_every_100_ms_unless_told_otherwise() -> None:
    assert prepare(eos()).task.commit_ms == 100
    assert prepare(eos(task__commit__ms=1000)).task.commit_ms == 1000
    assert prepare(eos(task__processing__guarantee="at-least-once")).task.commit_ms == 60_000


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        ({"task__checkpoint__factory": "metadata"}, "set task.checkpoint.factory=kafka"),
        ({"systems__kafka__transactional__writes": "false"}, "systems.kafka.transactional.writes=false"),
        ({"stores__counts__changelog": "log.counts-changelog"}, "stores.counts.changelog is on system 'log'"),
        (
            {"stores__counts__backup__factories": "blobstore", "task__checkpoint__read__versions": "2,1"},
            "set stores.counts.backup.factories=changelog",
        ),
        ({"task__dead__letter__stream": "log.dlq"}, "task.dead.letter.stream is on system 'log'"),
        (
            {"systems__log__streams__app-1-by-key__samza__intermediate": "true"},
            "the intermediate stream 'app-1-by-key' (app.intermediate.system) is on system 'log'",
        ),
    ],
)
def test_what_cannot_join_the_transaction_is_refused_naming_the_key(extra: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match="exactly-once") as refused:
        prepare(eos(**extra))
    assert names in str(refused.value)


def test_a_misspelt_guarantee_names_the_accepted_values() -> None:
    with pytest.raises(ConfigError, match="'at-least-once' or 'exactly-once'"):
        prepare(eos(task__processing__guarantee="exactly_once_v2"))


def log_eos(**extra: Any) -> Config:
    values = {
        "job.name": "eos",
        "task.class": "tests.jobs:PassThrough",
        "task.inputs": "log.in",
        "task.processing.guarantee": "exactly-once",
        "task.checkpoint.factory": "log",
    }
    values.update({key.replace("__", "."): str(value) for key, value in extra.items()})
    return Settings(values)


def test_an_exactly_once_job_on_the_embedded_log_with_its_checkpoints_there_is_accepted() -> None:
    config = prepare(log_eos(stores__counts__changelog="log.counts-changelog", task__dead__letter__stream="log.dlq"))
    assert config.task.exactly_once


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        ({"task__checkpoint__factory": "metadata"}, "task.checkpoint.factory=log (the embedded log"),
        ({"task__checkpoint__system": "kafka", "systems__kafka__samza__factory": "kafka"}, "task.checkpoint.system"),
        (
            {"stores__counts__backup__factories": "blobstore", "task__checkpoint__read__versions": "2,1"},
            "set stores.counts.backup.factories=changelog",
        ),
    ],
)
def test_what_cannot_join_the_logs_transaction_is_refused_naming_the_key(extra: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError) as refused:
        prepare(log_eos(**extra))
    assert names in str(refused.value)

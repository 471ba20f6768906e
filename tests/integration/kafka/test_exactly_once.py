"""``task.processing.guarantee=exactly-once`` on Kafka: a container's output, changelog writes and checkpoints
are committed in one transaction, so a crash at any point of a commit never duplicates output and never
double-counts: a ``read_committed`` reader sees every input reflected exactly once, with its exact count."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from millstream.config.settings import Settings
from millstream.model import SystemStream
from millstream.testing import InProcessRunner, write_stream
from tests.api.apps import app_config, messages, reference_counts
from tests.helpers import create_stream, seal, wait_until
from tests.integration.kafka.helpers import create_topic, job_config, produce, read_all
from tests.job_process import (
    COMMIT_POINTS,
    in_process,
    killed_at,
    paused_at,
    run_until_everything_is_checkpointed,
)

pytestmark = pytest.mark.integration

KEYS = 5
PER_PARTITION = 120


def eos_job(bootstrap: str, tmp_path: Path, topic_name: Callable[[str], str], **extra: Any) -> Settings:
    source, sink = topic_name("in"), topic_name("out")
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, sink, 1)
    for partition in range(2):
        records = [(f"k{i % KEYS}".encode(), orjson.dumps(i)) for i in range(PER_PARTITION)]
        produce(bootstrap, source, records, partition=partition)
    return job_config(
        bootstrap,
        tmp_path / "data",
        source,
        sink,
        job__name=f"eos-{uuid.uuid4().hex[:8]}",
        task__class="tests.integration.kafka.jobs:KafkaCountPerKey",
        task__processing__guarantee="exactly-once",
        stores__counts__factory="rocksdb",
        stores__counts__key__serde="string",
        stores__counts__msg__serde="json",
        stores__counts__changelog=f"kafka.{topic_name('changelog')}",
        **extra,
    )


def exact_once(bootstrap: str, config: Settings) -> None:
    """Every input is in the output exactly once, with the count a fault-free run gives it."""
    records = [orjson.loads(message.value()) for message in read_all(bootstrap, config["test.output"], 1)]
    seen = sorted((r["p"], r["v"]) for r in records)
    assert seen == sorted((p, i) for p in range(2) for i in range(PER_PARTITION)), "duplicates or losses"
    wrong = [r for r in records if r["count"] != r["v"] // KEYS + 1]
    assert not wrong, wrong[:3]


def test_an_exactly_once_job_writes_every_count_once(bootstrap: str, tmp_path: Path, topic_name: Any) -> None:
    config = eos_job(bootstrap, tmp_path, topic_name)
    run_until_everything_is_checkpointed(config, PER_PARTITION)
    exact_once(bootstrap, config)


@pytest.mark.parametrize("point", COMMIT_POINTS)
def test_a_container_killed_at_any_commit_point_neither_duplicates_nor_loses_output(
    bootstrap: str, tmp_path: Path, topic_name: Any, point: str
) -> None:
    config = eos_job(bootstrap, tmp_path, topic_name, test__delay__seconds="0.005", **paused_at(point, tmp_path))
    killed_at(config, point, tmp_path)
    run_until_everything_is_checkpointed(config, PER_PARTITION)
    exact_once(bootstrap, config)


@pytest.mark.parametrize("point", COMMIT_POINTS)
def test_windows_behind_a_repartition_come_out_once_with_exact_counts_after_a_kill(
    bootstrap: str, tmp_path: Path, topic_name: Any, point: str
) -> None:
    sink = topic_name("panes")
    # the panes carry 1970 event times as their timestamps: under the default time retention the broker deletes
    # any segment of them that rolls while the test runs, and the sink would be read from after the deletion
    create_topic(bootstrap, sink, 1, **{"retention.ms": "-1"})
    config = app_config(
        tmp_path,
        "tests.api.apps:WindowedCount",
        job__name=f"eos-app-{uuid.uuid4().hex[:8]}",
        app__intermediate__system="kafka",
        systems__kafka__samza__factory="kafka",
        systems__kafka__bootstrap__servers=bootstrap,
        task__processing__guarantee="exactly-once",
        task__checkpoint__factory="kafka",
        test__output=f"kafka.{sink}",
        test__delay__seconds="0.01",
        **paused_at(point, tmp_path),
    )
    data = {p: messages(p, 60, start=1) for p in range(2)}  # Kafka timestamps start after the epoch
    create_stream(config, "in", 2)
    for partition, pairs in data.items():
        write_stream(config, SystemStream("log", "in"), pairs, partition=partition)
    seal(config, "in")
    killed_at(config, point, tmp_path)
    result = InProcessRunner(config).run(timeout=300)
    assert result.outcome == "finished", result.error
    panes = [orjson.loads(m.value()) for m in read_all(bootstrap, sink, 1)]
    windows = Counter((p["user"], p["start"]) for p in panes if "count" in p)
    assert set(windows.values()) == {1}, [w for w, n in windows.items() if n > 1][:3]  # each window once
    assert {(p["user"], p["start"]): p["count"] for p in panes if "count" in p} == reference_counts(data)


def test_a_paused_container_resumed_after_its_replacement_ran_commits_nothing(
    bootstrap: str, tmp_path: Path, topic_name: Any
) -> None:
    config = eos_job(bootstrap, tmp_path, topic_name, test__delay__seconds="0.05")
    zombie = in_process(config, tmp_path)
    try:
        wait_until(lambda: len(read_all(bootstrap, config["test.output"], 1)) >= 20, 120, "the first run's output")
        os.kill(zombie.pid, signal.SIGSTOP)  # paused in the middle of a transaction, with more to write
        run_until_everything_is_checkpointed(
            config, PER_PARTITION
        )  # the replacement: a new generation, which fences it
        os.kill(zombie.pid, signal.SIGCONT)
        assert zombie.wait(120) != 0  # it learns it was fenced at its next write or commit
    finally:
        zombie.kill()
        zombie.wait(30)
    exact_once(bootstrap, config)


TRANSACTION_TIMEOUT_MS = 3_000
"""``systems.kafka.producer.transaction.timeout.ms`` of the abort test: well above its ``task.commit.ms``."""


def test_a_transaction_the_broker_aborted_at_its_timeout_loses_and_duplicates_nothing(
    bootstrap: str, tmp_path: Path, topic_name: Any
) -> None:
    config = eos_job(
        bootstrap,
        tmp_path,
        topic_name,
        test__delay__seconds="0.02",
        task__commit__ms="1000",  # the paused transaction holds output, not only the checkpoint
        systems__kafka__producer__transaction__timeout__ms=str(TRANSACTION_TIMEOUT_MS),
        **{**paused_at("after-upload", tmp_path), "task__commit__testing__pause__ms": "500"},
    )
    job = in_process(config, tmp_path)
    try:
        marker = tmp_path / "markers" / "after-upload"
        wait_until(lambda: marker.exists() or job.poll() is not None, 120, "a commit paused before its transaction")
        os.kill(job.pid, signal.SIGSTOP)  # the transaction holds output and the checkpoint, not yet committed
        time.sleep(3 * TRANSACTION_TIMEOUT_MS / 1000)  # the fault: stopped past the timeout, so the broker aborts
        os.kill(job.pid, signal.SIGCONT)
        code = job.wait(60)
    finally:
        job.kill()
        job.wait(30)
    log = (tmp_path / "job.log").read_text(errors="replace")
    assert code != 0, "the aborted transaction's commit failed the container"
    failure = next(line for line in log.splitlines() if line.startswith("job failed:"))
    assert "KafkaTransactionAbortedError" in failure and "no newer attempt exists" in failure, failure
    assert "FencedError" not in log, log[-3000:]  # the brokers' abort, never taken for a newer attempt's fence
    aborted = len(read_all(bootstrap, config["test.output"], 1, isolation="read_uncommitted"))
    assert aborted > len(read_all(bootstrap, config["test.output"], 1)), "the aborted transaction held output"
    run_until_everything_is_checkpointed(config, PER_PARTITION)
    exact_once(bootstrap, config)

"""Kafka → Kafka jobs through the Spark runner in local mode, with checkpoints and metadata in Kafka
only: two containers over four partitions, a container SIGKILLed mid-run, and the broker restarted
mid-run. Kafka streams never end, so each test stops the job once every input reached the output."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.coordinator.job_result import JobResult
from millstream.spark.run.runner import SparkJobRunner
from tests.integration.kafka.helpers import TopicTail, create_topic, job_config, produce_numbers

pytestmark = [pytest.mark.integration, pytest.mark.spark]


class RunningJob:
    """A job run by the Spark runner in a background thread."""

    def __init__(self, config: Settings, spark: SparkSession) -> None:
        self.runner = SparkJobRunner(config, spark=spark)
        self.outcome: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.outcome["result"] = self.runner.run()
        except BaseException as error:
            self.outcome["error"] = error

    def stop(self, timeout: float = 120) -> JobResult:
        self.runner.request_stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the job did not stop"
        if "error" in self.outcome:
            raise self.outcome["error"]
        return self.outcome["result"]


def no_sqlite_files(data_dir: Path) -> None:
    assert not list(data_dir.rglob("*.db")), "a job with Kafka metadata and checkpoints must not create SQLite files"


def checkpointed_offsets(config: Settings) -> dict[tuple[int, int], int]:
    """(task number, input partition) → checkpointed offset, from the Kafka checkpoint topic."""
    store = metadata_store(config)
    try:
        manager = checkpoint_manager(config, store)
        manager.start()
        try:
            return {
                (int(task.split()[-1]), ssp.partition): int(offset)
                for task, checkpoint in manager.read_all().items()
                for ssp, offset in checkpoint.offsets.items()
                if offset is not None
            }
        finally:
            manager.stop()
    finally:
        store.close()


def setup_topics(bootstrap: str, topic_name, partitions: int = 4) -> tuple[str, str]:
    source, sink = topic_name("in"), topic_name("out")
    create_topic(bootstrap, source, partitions)
    create_topic(bootstrap, sink, partitions)
    return source, sink


def test_four_partitions_two_containers_kafka_to_kafka_with_kafka_checkpoints_and_metadata(
    spark, bootstrap, topic_name, tmp_path
):
    source, sink = setup_topics(bootstrap, topic_name)
    config = job_config(bootstrap, tmp_path, source, sink, job__container__count=2)
    written = produce_numbers(bootstrap, source, 4, 250)
    tail = TopicTail(bootstrap, sink, 4)
    job = RunningJob(config, spark)
    try:
        tail.wait_for(written, timeout=120)
    finally:
        result = job.stop()
    assert result.outcome == "stopped", result.error
    assert sorted(c.container_id for c in result.containers) == ["0", "1"]
    assert sum(c.messages for c in result.containers) == 1000
    tail.poll(1.0)
    assert sorted(tail.origins()) == sorted(written), "exactly once without failures"
    assert checkpointed_offsets(config) == {(p, p): 249 for p in range(4)}
    no_sqlite_files(tmp_path)

    # A second run resumes after the checkpoints: only new input is processed.
    more = produce_numbers(bootstrap, source, 4, 25, start=250)
    job = RunningJob(config, spark)
    try:
        tail.wait_for(written | more, timeout=120)
    finally:
        second = job.stop()
    assert second.outcome == "stopped", second.error
    assert second.generation == result.generation + 1
    assert second.messages == 100
    no_sqlite_files(tmp_path)
    tail.close()


def test_a_sigkilled_container_is_retried_and_resumes_from_its_kafka_checkpoint(spark, bootstrap, topic_name, tmp_path):
    source, sink = setup_topics(bootstrap, topic_name)
    config = job_config(
        bootstrap, tmp_path, source, sink, job__container__count=2, test__delay__seconds=0.004, task__commit__ms=200
    )
    written = produce_numbers(bootstrap, source, 4, 400)
    tail = TopicTail(bootstrap, sink, 4)
    store = metadata_store(config)
    job = RunningJob(config, spark)
    try:
        victim = wait_for(lambda: _running_with_checkpoints(store, config, "0"), timeout=120)
        os.kill(victim, signal.SIGKILL)
        tail.wait_for(written, timeout=180)
        statuses = coordination.container_statuses(store)
    finally:
        result = job.stop()
        store.close()
    assert result.outcome == "stopped", result.error
    assert {c.container_id: c.epoch for c in result.containers}["0"] >= 2
    assert statuses["0"]["pid"] != victim
    origins = tail.origins()
    assert set(origins) == written, "at-least-once: nothing lost"
    assert len(origins) >= len(written)
    assert checkpointed_offsets(config) == {(p, p): 399 for p in range(4)}
    no_sqlite_files(tmp_path)
    tail.close()


LIVENESS_TIMEOUT_MS = 10_000
"""The containers' liveness timeout (the default) and the driver's in the broker-restart test: shorter than the
broker's outage (its shutdown, ``BROKER_DOWN_S`` and its start), so counting the outage as silence would show."""
BROKER_DOWN_S = LIVENESS_TIMEOUT_MS / 1000


def test_the_job_survives_a_broker_restart_longer_than_the_liveness_timeouts_without_a_new_attempt_or_a_loss(
    spark, kafka_broker, bootstrap, topic_name, tmp_path
):
    """With the metadata store in Kafka, the restart stops every heartbeat, the driver's too: neither the driver
    replaces a container for it nor a container takes its driver for lost."""
    source, sink = setup_topics(bootstrap, topic_name)
    config = job_config(
        bootstrap,
        tmp_path,
        source,
        sink,
        job__container__count=2,
        test__delay__seconds=0.002,
        task__commit__ms=200,
        job__container__liveness__timeout__ms=LIVENESS_TIMEOUT_MS,
        job__driver__liveness__timeout__ms=LIVENESS_TIMEOUT_MS,
    )
    written = produce_numbers(bootstrap, source, 4, 300)
    tail = TopicTail(bootstrap, sink, 4)
    job = RunningJob(config, spark)
    try:
        wait_for(lambda: len(tail.poll()) >= 200 and {p for p, _ in tail.origins()} == {0, 1, 2, 3}, timeout=120)
        attempts = _attempts(config)  # both containers run: their output comes from every partition
        kafka_broker.restart(down_seconds=BROKER_DOWN_S)
        written |= produce_numbers(bootstrap, source, 4, 100, start=300)
        tail.wait_for(written, timeout=240)
    finally:
        result = job.stop(timeout=240)
    assert result.outcome == "stopped", result.error
    assert {c.container_id: c.epoch for c in result.containers} == attempts, "no container was started again"
    assert set(tail.origins()) == written, "every acknowledged input reached the output"
    assert checkpointed_offsets(config) == {(p, p): 399 for p in range(4)}
    no_sqlite_files(tmp_path)
    tail.close()


def _attempts(config: Settings) -> dict[str, int]:
    """Each container's attempt, from the statuses in the metadata store."""
    store = metadata_store(config)
    try:
        return {cid: int(status["attempt"]) for cid, status in coordination.container_statuses(store).items()}
    finally:
        store.close()


def _running_with_checkpoints(store, config: Settings, container_id: str) -> int | None:
    status = coordination.container_statuses(store).get(container_id, {})
    if status.get("state") == "running" and len(checkpointed_offsets(config)) >= 4:
        return int(status["pid"])
    return None


def wait_for(probe, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"condition not met within {timeout}s")

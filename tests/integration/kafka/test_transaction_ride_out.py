"""Issue 38 item 2 at the producer: a changelog transaction the brokers aborted while they restarted (its timeout
passed, and the restarted coordinator bumped the producer's epoch, which librdkafka reports as "fenced by a newer
instance") is not a fence when the metadata store names no newer attempt. The producer is replaced (same
transactional id), the aborted transaction's records are sent again in order and committed: the changelog holds
every write exactly once, as a restore must read it. A real newer attempt still fences it."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.connectors.kafka import factory as kafka_factory
from millstream.connectors.kafka.config import KafkaClientSettings
from millstream.connectors.kafka.errors import KafkaTransactionAbortedError
from millstream.connectors.kafka.transactions import fence_transactional_id
from millstream.contracts import coordination
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.systems import WriterFencedError, WriterToken
from millstream.model import OutgoingMessageEnvelope, SystemStream, TaskName
from millstream.runtime.services import ContainerServices
from millstream.systems.producers import ProducerPool
from millstream.testing import InProcessRunner
from tests.helpers import wait_until
from tests.integration.kafka.helpers import create_topic, job_config, kafka_config, produce, read_all
from tests.integration.kafka.test_broker_restart import wait_until_no_open_transaction
from tests.integration.kafka.test_spark_changelog_faults import (
    MESSAGES_PER_KEY,
    PARTITIONS,
    checkpointed_messages,
    every_key_counted,
    expected_counts,
    final_counts,
    input_records,
)
from tests.storage.harness import restored_contents

pytestmark = pytest.mark.integration

TRANSACTION_TIMEOUT_MS = 3000
"""Short, so the restarted broker aborts the open transaction within seconds, as a long outage does."""
SOURCE = "task"


@dataclass
class Container:
    config: Settings
    store: MetadataStore
    pool: ProducerPool
    changelog: str


@pytest.fixture
def container(
    kafka_broker, bootstrap: str, tmp_path: Path, topic_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Container]:
    """Attempt 1 of container 0, its producer pool started (changelog writes in transactions)."""
    with open_container(bootstrap, tmp_path, topic_name, monkeypatch) as opened:
        yield opened


@contextlib.contextmanager
def open_container(
    bootstrap: str,
    tmp_path: Path,
    topic_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    guarantee: str = "at-least-once",
) -> Iterator[Container]:
    monkeypatch.setattr(kafka_factory, "transaction_timeout_ms", lambda commit_ms: TRANSACTION_TIMEOUT_MS)
    changelog = topic_name("changelog")
    create_topic(bootstrap, changelog, 1)
    config = kafka_config(
        bootstrap,
        job__name=f"ride-out-{uuid.uuid4().hex[:8]}",
        job__data__dir=str(tmp_path),
        metadata__store__factory="sqlite",
        task__processing__guarantee=guarantee,
    )
    store = metadata_store(config)
    store.init()
    coordination.publish_generation(store, 1)
    epoch = coordination.start_container_attempt(store, "0")
    services = ContainerServices(config, writer=WriterToken(config.job.job_key, "0", 1, epoch))
    pool = services.producers
    try:
        yield Container(config, store, pool, changelog)
    finally:
        try:
            services.close()
        except Exception as error:  # the fenced case leaves a fenced producer behind
            logging.getLogger(__name__).info("stopping the pool: %s", error)
        store.close()


def write(container: Container, start: int, stop: int) -> None:
    producer = container.pool.state_producer("kafka")
    stream = SystemStream("kafka", container.changelog)
    for i in range(start, stop):
        producer.send(SOURCE, OutgoingMessageEnvelope(stream, f"v{i}".encode(), f"k{i}".encode(), partition=0))


def written_uncommitted(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw", "isolation.level": "read_uncommitted"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
    finally:
        consumer.close()


def abort_by_broker_restart(kafka_broker, bootstrap: str, container: Container, records_on_broker: int) -> None:
    """Restart the broker while the transaction is open, its records on the broker, and wait until the restarted
    coordinator has aborted it (timed out): the producer meets the abort at its next commit."""
    wait_until(lambda: written_uncommitted(bootstrap, container.changelog) >= records_on_broker, 30, "records sent")
    kafka_broker.restart(down_seconds=TRANSACTION_TIMEOUT_MS / 1000 + 1)
    wait_until_no_open_transaction(bootstrap, container.changelog)


def changelog_values(bootstrap: str, topic: str) -> list[bytes]:
    return [message.value() for message in read_all(bootstrap, topic, 1, isolation="read_committed")]


def test_a_transaction_the_restarted_broker_aborted_is_sent_again_and_committed_without_a_fence(
    kafka_broker, bootstrap: str, container: Container, caplog: pytest.LogCaptureFixture
) -> None:
    write(container, 0, 100)
    container.pool.flush(SOURCE)
    write(container, 100, 250)
    abort_by_broker_restart(kafka_broker, bootstrap, container, 250)

    with caplog.at_level(logging.WARNING, logger="millstream.connectors.kafka.producer"):
        started = time.monotonic()
        container.pool.flush(SOURCE)  # the commit: ridden out, not a WriterFencedError
    assert "no newer attempt exists, so its 150 record(s) are sent again" in caplog.text, caplog.text
    assert "a newer attempt owns its writes" not in caplog.text
    assert time.monotonic() - started < 60, "within the deadline, systems.kafka.operation.timeout.ms"

    write(container, 250, 300)  # the replacement producer goes on writing
    container.pool.flush(SOURCE)
    assert changelog_values(bootstrap, container.changelog) == [f"v{i}".encode() for i in range(300)], (
        "every write exactly once, in order"
    )


def test_a_fenced_producer_whose_newer_attempt_is_in_the_metadata_store_stays_fenced(
    bootstrap: str, container: Container
) -> None:
    """The fence's cause is asked of the metadata store: attempt 2 is recorded there (and took over the
    transactional id), so this is a zombie, and it is neither replaced nor lets anything through."""
    write(container, 0, 100)
    container.pool.flush(SOURCE)
    write(container, 100, 250)
    coordination.start_container_attempt(container.store, "0")  # attempt 2 starts: first the store, then
    job = container.config.job.job_key
    fence_transactional_id("kafka", KafkaClientSettings(container.config, "kafka"), "0", job)  # its producer

    with pytest.raises(WriterFencedError, match="a newer attempt owns its writes"):
        container.pool.flush(SOURCE)
    assert changelog_values(bootstrap, container.changelog) == [f"v{i}".encode() for i in range(100)], (
        "nothing of the zombie's transaction is visible"
    )


def test_under_exactly_once_a_transaction_the_restarted_broker_aborted_fails_the_commit_but_not_as_a_fence(
    kafka_broker, bootstrap: str, tmp_path: Path, topic_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transaction held output and checkpoints whose offsets no longer hold once it is sent again: the commit
    fails (the container restarts from its last checkpoint), saying no newer attempt exists — not "fenced"."""
    with open_container(bootstrap, tmp_path, topic_name, monkeypatch, "exactly-once") as container:
        write(container, 0, 100)
        container.pool.commit_transaction()
        write(container, 100, 250)
        container.pool.flush(SOURCE)
        abort_by_broker_restart(kafka_broker, bootstrap, container, 250)

        with pytest.raises(KafkaTransactionAbortedError, match="no newer attempt exists") as failed:
            container.pool.commit_transaction()
        assert not isinstance(failed.value, WriterFencedError)
        assert "a newer attempt owns its writes" not in str(failed.value)
        assert changelog_values(bootstrap, container.changelog) == [f"v{i}".encode() for i in range(100)]


def test_a_stateful_job_rides_out_a_broker_restart_mid_transaction_without_a_container_failure(
    kafka_broker, bootstrap: str, tmp_path: Path, topic_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """Every count written through to the changelog (no object cache), so a changelog transaction is always open:
    the broker, down longer than the transaction's timeout, aborts it when it comes back. The container replaces
    its producer, sends the transaction again and goes on: no failure, every count exact and sent once."""
    monkeypatch.setattr(kafka_factory, "transaction_timeout_ms", lambda commit_ms: TRANSACTION_TIMEOUT_MS)
    source, sink, changelog = topic_name("in"), topic_name("out"), topic_name("counts")
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, PARTITIONS)
    for partition, records in input_records().items():
        produce(bootstrap, source, records, partition=partition)
    config = job_config(
        bootstrap,
        tmp_path / "data",
        source,
        sink,
        job__name=f"restart-{uuid.uuid4().hex[:8]}",
        task__class="tests.integration.kafka.jobs:KafkaCountPerKey",
        task__checkpoint__factory="metadata",
        metadata__store__factory="sqlite",
        stores__counts__factory="rocksdb",
        stores__counts__key__serde="string",
        stores__counts__msg__serde="json",
        stores__counts__changelog=f"kafka.{changelog}",
        stores__counts__object__cache__size=0,
        job__container__count=1,
        job__container__retry__count=3,
        task__commit__ms=300,
        test__delay__seconds=0.01,
    )
    runner = InProcessRunner(config)
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("result", runner.run(timeout=300)), daemon=True)
    with caplog.at_level(logging.WARNING, logger="millstream.connectors.kafka.producer"):
        thread.start()
        try:
            wait_until(lambda: checkpointed_messages(config, source) > 0, 120, "a first checkpoint")
            kafka_broker.restart(down_seconds=TRANSACTION_TIMEOUT_MS / 1000 + 1)
            assert checkpointed_messages(config, source) < PARTITIONS * 4 * MESSAGES_PER_KEY, "input left"
            wait_until(lambda: every_key_counted(bootstrap, sink), 240, "every key's final count in the output")
        finally:
            runner.request_stop()
            thread.join(120)
    result = outcome["result"]
    assert result.outcome == "stopped", result.error
    assert [container.epoch for container in result.containers] == [1], "no container failed: no retry"
    assert "the brokers aborted the open transaction" in caplog.text, "the restart aborted a transaction"
    assert "a newer attempt owns its writes" not in caplog.text
    counts = final_counts(bootstrap, sink)
    assert all(sent == list(range(1, MESSAGES_PER_KEY + 1)) for sent in counts.values()), "no count twice, no gap"
    assert {key: sent[-1] for key, sent in counts.items()} == expected_counts()
    for partition in range(PARTITIONS):
        want = {key: n for key, n in expected_counts().items() if key.startswith(f"p{partition}-")}
        assert restored_contents(config, TaskName(f"Partition {partition}"), tmp_path / f"host-{partition}") == want

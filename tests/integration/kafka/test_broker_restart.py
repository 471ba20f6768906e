"""Metadata and checkpoint writes in flight while the broker restarts: they wait, retry and complete
once it is back, and nothing written before or during the outage is lost."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from millstream.checkpoint.base import WriterFence
from millstream.checkpoint.checkpoint import CheckpointV1
from millstream.checkpoint.factory import checkpoint_manager
from millstream.connectors.kafka import checkpoint as kafka_checkpoint
from millstream.connectors.kafka.metadata import KafkaMetadataStore
from millstream.contracts import coordination
from millstream.embedded.sqlite import SqliteMetadataStore
from millstream.model import SystemStreamPartition, TaskName
from tests.integration.kafka.helpers import kafka_config

pytestmark = pytest.mark.integration


def test_metadata_and_checkpoint_writes_survive_a_broker_restart(kafka_broker, bootstrap):
    config = kafka_config(
        bootstrap, job__name=f"restart-{uuid.uuid4().hex[:8]}", metadata__store__factory="kafka"
    ).with_overrides({"task.checkpoint.factory": "kafka"})
    store = KafkaMetadataStore(config)
    coordination.publish_generation(store, 1)
    epoch = coordination.start_container_attempt(store, "0")
    checkpoints = checkpoint_manager(config, store, WriterFence(1, "0", epoch))
    checkpoints.start()
    task = TaskName("Partition 0")
    ssp = SystemStreamPartition("kafka", "in", 0)
    errors: list[BaseException] = []
    done = {"increments": 0, "checkpoint": -1}
    stop = threading.Event()

    def write() -> None:
        try:
            while not stop.is_set():
                raw = store.get("test", "counter")
                if store.compare_and_put(
                    "test", "counter", str(int(raw or b"0") + 1).encode(), {("test", "counter"): raw}
                ):
                    done["increments"] += 1
                store.put("test", "last", str(done["increments"]).encode())
                checkpoints.write_checkpoint(task, CheckpointV1({ssp: str(done["increments"])}))
                done["checkpoint"] = done["increments"]
        except BaseException as error:
            errors.append(error)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        deadline = time.monotonic() + 60
        while done["increments"] < 5 and time.monotonic() < deadline and not errors:
            time.sleep(0.05)
        before = done["increments"]
        kafka_broker.restart(down_seconds=2)
        deadline = time.monotonic() + 120
        while done["increments"] < before + 5 and time.monotonic() < deadline and not errors:
            time.sleep(0.05)
    finally:
        stop.set()
        writer.join(180)
    assert not errors, errors
    assert done["increments"] >= before + 5, "writes resumed after the restart"

    fresh = KafkaMetadataStore(config)
    try:
        assert fresh.get("test", "counter") == str(done["increments"]).encode(), "no increment lost or doubled"
        assert fresh.get("test", "last") == str(done["increments"]).encode()
        reader = checkpoint_manager(config, fresh)
        reader.start()
        assert reader.read_last_checkpoint(task) == CheckpointV1({ssp: str(done["checkpoint"])})
        reader.stop()
    finally:
        fresh.close()
        checkpoints.stop()
        store.close()


class RestartingBrokerStore(SqliteMetadataStore):
    """A metadata store that restarts the broker the first time a checkpoint write checks its fence — while the
    write's transaction is open on the broker — once armed, and holds the write until the restarted coordinator
    has aborted that transaction. Without the wait the commit can reach the coordinator before its timeout sweep
    does, and the test would pass without the broker ever fencing the producer."""

    def __init__(self, path, broker, down_seconds: float) -> None:
        super().__init__(path)
        self.broker = broker
        self.down_seconds = down_seconds
        self.armed_for_topic: str | None = None
        self.up_at: float | None = None

    def get(self, namespace: str, key: str) -> bytes | None:
        if self.armed_for_topic is not None and namespace == coordination.CONTAINER_EPOCH_NAMESPACE:
            topic, self.armed_for_topic = self.armed_for_topic, None
            self.broker.restart(down_seconds=self.down_seconds)
            self.up_at = time.monotonic()
            wait_until_no_open_transaction(self.broker.bootstrap_servers, topic)
        return super().get(namespace, key)


def wait_until_no_open_transaction(bootstrap: str, topic: str, timeout_s: float = 60) -> None:
    """Partition 0 of ``topic`` has no open transaction once its last stable offset (what a read_committed
    reader's end is) has caught up with its high watermark."""
    committed = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    uncommitted = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw", "isolation.level": "read_uncommitted"})
    partition = TopicPartition(topic, 0)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                stable = committed.get_watermark_offsets(partition, timeout=5)[1]
                high = uncommitted.get_watermark_offsets(partition, timeout=5)[1]
            except KafkaException:  # the restarted broker is still electing leaders
                stable, high = -1, 0
            if stable == high:
                return
            time.sleep(0.2)
        raise AssertionError(f"the restarted broker did not abort the open transaction on {topic} in {timeout_s}s")
    finally:
        committed.close()
        uncommitted.close()


def test_a_checkpoint_transaction_the_restarted_broker_timed_out_is_written_again_not_fenced(
    kafka_broker, bootstrap, tmp_path, monkeypatch, caplog
):
    """The broker aborts a transaction older than its timeout when it comes back and bumps the producer's epoch,
    which librdkafka reports as a fence. No newer attempt exists, so the write starts a new producer and is done
    again — a ``FencedError`` here failed the container for nothing."""
    monkeypatch.setattr(kafka_checkpoint, "TRANSACTION_TIMEOUT_MS", 3000)
    config = kafka_config(bootstrap, job__name=f"txn-timeout-{uuid.uuid4().hex[:8]}").with_overrides(
        {"task.checkpoint.factory": "kafka"}
    )
    store = RestartingBrokerStore(tmp_path / "metadata.db", kafka_broker, down_seconds=4)
    coordination.publish_generation(store, 1)
    epoch = coordination.start_container_attempt(store, "0")
    checkpoints = checkpoint_manager(config, store, WriterFence(1, "0", epoch))
    checkpoints.start()
    task = TaskName("Partition 0")
    ssp = SystemStreamPartition("kafka", "in", 0)
    checkpoints.write_checkpoint(task, CheckpointV1({ssp: "1"}))
    assert isinstance(checkpoints, kafka_checkpoint.KafkaCheckpointManager)
    store.armed_for_topic = checkpoints.topic
    with caplog.at_level(logging.WARNING, logger="millstream.connectors.kafka.checkpoint"):
        checkpoints.write_checkpoint(task, CheckpointV1({ssp: "2"}))
    checkpoints.stop()
    assert store.up_at is not None, "the broker restarted while the transaction was open"
    assert "fenced by the brokers, not by a newer attempt" in caplog.text
    reader = checkpoint_manager(config, store)
    reader.start()
    try:
        assert reader.read_last_checkpoint(task) == CheckpointV1({ssp: "2"})
    finally:
        reader.stop()
        store.close()

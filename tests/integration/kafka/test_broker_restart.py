"""Metadata and checkpoint writes in flight while the broker restarts: they wait, retry and complete
once it is back, and nothing written before or during the outage is lost."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from millstream.checkpoint.base import WriterFence
from millstream.checkpoint.checkpoint import CheckpointV1
from millstream.checkpoint.factory import checkpoint_manager
from millstream.metadata import coordination
from millstream.model import SystemStreamPartition, TaskName
from millstream.systems.kafka.metadata import KafkaMetadataStore
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

"""The Kafka metadata store (the coordinator stream) against a real broker: the MetadataStore
contract, atomic compare-and-put across processes, compaction, pickling and bad topics."""

from __future__ import annotations

import multiprocessing
import pickle
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.connectors.kafka.errors import KafkaBrokersUnreachableError
from millstream.connectors.kafka.metadata import KafkaMetadataStore
from millstream.connectors.kafka.replicated_log import ReplicatedLogTopicError
from millstream.contracts import coordination
from millstream.contracts.metadata import FencedError
from millstream.errors import ConfigError
from tests.integration.kafka.helpers import create_topic, kafka_config
from tests.integration.processes import free_port

pytestmark = pytest.mark.integration


def store_config(bootstrap: str, **extra) -> Settings:
    return kafka_config(
        bootstrap,
        metadata__store__factory="kafka",
        job__name=f"meta-{uuid.uuid4().hex[:8]}",
        **extra,
    )


@pytest.fixture
def config(bootstrap):
    return store_config(bootstrap)


@pytest.fixture
def store(config):
    store = metadata_store(config)
    assert isinstance(store, KafkaMetadataStore)
    yield store
    store.close()


def test_put_get_delete_and_namespaces(store):
    assert store.get("ns", "absent") is None
    store.put("ns", "k", b"\x00value\xff")
    store.put("other", "k", b"in-other")
    assert store.get("ns", "k") == b"\x00value\xff"
    store.put("ns", "k", b"2")
    assert store.get("ns", "k") == b"2"
    store.put_all("ns", {"a": b"1", "b": b"2"})
    assert store.all("ns") == {"a": b"1", "b": b"2", "k": b"2"}
    store.delete("ns", "a")
    store.delete("ns", "never-there")
    store.delete_all("ns", ["k", "zz"])
    assert store.all("ns") == {"b": b"2"}
    assert store.all("other") == {"k": b"in-other"}
    assert store.namespace("ns").get("b") == b"2"


def test_keys_with_separators_do_not_collide(store):
    store.put("a/b", "c", b"1")
    store.put("a", "b/c", b"2")
    assert store.get("a/b", "c") == b"1"
    assert store.get("a", "b/c") == b"2"


def test_writes_are_visible_to_another_store_at_once(config, store):
    other = KafkaMetadataStore(config)
    try:
        assert other.get("ns", "k") is None
        store.put("ns", "k", b"v1")
        assert other.get("ns", "k") == b"v1"
        other.delete("ns", "k")
        assert store.get("ns", "k") is None
        other.put("ns", "k", b"v2")
        assert store.all("ns") == {"k": b"v2"}
    finally:
        other.close()


def test_compare_and_put_semantics(store):
    assert store.compare_and_put("ns", "k", b"1", {("ns", "k"): None}) is True
    assert store.compare_and_put("ns", "k", b"x", {("ns", "k"): None}) is False
    assert store.get("ns", "k") == b"1"
    store.put("fence", "gen", b"3")
    assert store.compare_and_put("ns", "k", b"2", {("ns", "k"): b"1", ("fence", "gen"): b"3"}) is True
    assert store.compare_and_put("ns", "k", b"3", {("ns", "k"): b"2", ("fence", "gen"): b"2"}) is False
    assert store.compare_and_put("ns", "free", b"v", {}) is True
    assert store.all("ns") == {"k": b"2", "free": b"v"}


def test_coordination_records_and_fencing_work_on_kafka(store):
    assert coordination.current_generation(store) == 0
    coordination.publish_generation(store, 1)
    assert [coordination.start_container_attempt(store, "0") for _ in range(3)] == [1, 2, 3]
    assert store.compare_and_put("checkpoint-v1", "t", b"x", coordination.writer_expectation(1, "0", 3))
    assert not store.compare_and_put("checkpoint-v1", "t", b"y", coordination.writer_expectation(1, "0", 2))
    coordination.publish_generation(store, 2)
    with pytest.raises(FencedError):
        coordination.publish_generation(store, 1)
    coordination.request_stop(store, 2)
    assert coordination.stop_requested(store, 2)
    coordination.clear_stop(store)
    assert not coordination.stop_requested(store, 2)


def test_the_store_pickles_to_its_config_only(config, store):
    store.put("ns", "k", b"v")
    assert set(store.__getstate__()) == {"config", "source"}
    copy = pickle.loads(pickle.dumps(store))
    try:
        assert copy.get("ns", "k") == b"v"
    finally:
        copy.close()


def _increment(config_items: dict, count: int) -> None:
    store = KafkaMetadataStore(Settings(config_items))
    try:
        for _ in range(count):
            while True:
                raw = store.get("counter", "n")
                new = str(int(raw or b"0") + 1).encode()
                if store.compare_and_put("counter", "n", new, {("counter", "n"): raw}):
                    break
    finally:
        store.close()


def test_concurrent_compare_and_put_from_several_processes_loses_no_increment(config, store):
    context = multiprocessing.get_context("spawn")
    per_process = 15
    processes = [context.Process(target=_increment, args=(config.to_dict(), per_process)) for _ in range(4)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=180)
        assert process.exitcode == 0
    assert store.get("counter", "n") == str(4 * per_process).encode()


def _epochs(config_items: dict, queue) -> None:
    store = KafkaMetadataStore(Settings(config_items))
    try:
        queue.put([coordination.start_container_attempt(store, "c") for _ in range(5)])
    finally:
        store.close()


def test_concurrent_container_attempts_get_distinct_epochs(config, store):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = [context.Process(target=_epochs, args=(config.to_dict(), queue)) for _ in range(3)]
    for process in processes:
        process.start()
    epochs = [epoch for _ in processes for epoch in queue.get(timeout=180)]
    for process in processes:
        process.join(timeout=60)
    assert sorted(epochs) == list(range(1, 16))


def _record_count(bootstrap: str, topic: str) -> tuple[int, int]:
    """(records physically in the log, its end offset)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "count", "isolation.level": "read_uncommitted"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        consumer.assign([TopicPartition(topic, 0, 0)])
        count, position = 0, 0
        deadline = time.monotonic() + 30
        while position < high and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.2):
                if message.error() is None:
                    offset = message.offset()
                    assert offset is not None  # set on every consumed message
                    count += 1
                    position = offset + 1
            position = max(position, consumer.position([TopicPartition(topic, 0)])[0].offset)
        return count, high
    finally:
        consumer.close()


def test_state_survives_compaction_of_the_coordinator_stream(bootstrap, config):
    topic = f"__millstream-coordinator-{config['job.name']}-1"
    # Roll segments quickly and clean eagerly, so the cleaner compacts while the test runs.
    create_topic(
        bootstrap,
        topic,
        1,
        **{
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.001",
            "delete.retention.ms": "100",
            "min.compaction.lag.ms": "0",
        },
    )
    store = KafkaMetadataStore(config)
    try:
        for round_ in range(30):
            raw = store.get("ns", "counter")
            assert store.compare_and_put("ns", "counter", str(round_).encode(), {("ns", "counter"): raw})
            assert not store.compare_and_put("ns", "counter", b"loser", {("ns", "counter"): b"stale"})
            store.put("ns", f"temp-{round_}", b"x")
            store.delete("ns", f"temp-{round_}")
            store.put("ns", "last", str(round_).encode())
        expected = store.all("ns")
        assert expected == {"counter": b"29", "last": b"29"}
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            store.put("ns", "tick", b"roll")  # a new record lets the active segment roll
            count, high = _record_count(bootstrap, topic)
            if count < high / 3:
                break
            time.sleep(1)
        else:
            pytest.fail(f"the log cleaner did not compact {topic} within 90 s ({count} of {high} records left)")
    finally:
        store.close()
    fresh = KafkaMetadataStore(config)
    try:
        state = fresh.all("ns")
        state.pop("tick")
        assert state == expected
        assert fresh.compare_and_put("ns", "counter", b"30", {("ns", "counter"): b"29"})
    finally:
        fresh.close()


def test_a_coordinator_topic_with_several_partitions_or_without_compaction_is_refused(bootstrap):
    config = store_config(bootstrap)
    create_topic(bootstrap, f"__millstream-coordinator-{config['job.name']}-1", 3, **{"cleanup.policy": "compact"})
    with pytest.raises(ReplicatedLogTopicError, match=r"has 3 partitions; it must have exactly 1"):
        KafkaMetadataStore(config).get("ns", "k")
    config = store_config(bootstrap)
    create_topic(bootstrap, f"__millstream-coordinator-{config['job.name']}-1", 1)
    with pytest.raises(ReplicatedLogTopicError, match=r"cleanup.policy='delete'; it must be 'compact'"):
        KafkaMetadataStore(config).get("ns", "k")


def test_configured_topic_and_system(bootstrap, topic_name):
    topic = topic_name("coordinator")
    config = kafka_config(
        bootstrap,
        systems__other__samza__factory="kafka",
        systems__other__bootstrap__servers=bootstrap,
        job__coordinator__system="other",
        job__coordinator__topic=topic,
    )
    store = KafkaMetadataStore(config)
    try:
        assert (store.system, store.topic) == ("other", topic)
        store.put("ns", "k", b"v")
        assert store.get("ns", "k") == b"v"
    finally:
        store.close()
    with pytest.raises(ConfigError, match=r"metadata.store.factory=kafka needs a Kafka system: set 'job.coordinator"):
        KafkaMetadataStore(config.without("job.coordinator.system"))
    with pytest.raises(ConfigError, match=r"'job.coordinator.system' names system 'log'"):
        KafkaMetadataStore(config.with_overrides({"job.coordinator.system": "log"}))


def test_unreachable_brokers_fail_within_the_startup_timeout_naming_them():
    address = f"127.0.0.1:{free_port()}"
    store = KafkaMetadataStore(store_config(address, systems__kafka__startup__timeout__ms=1500))
    with pytest.raises(KafkaBrokersUnreachableError, match=f"no broker at {address} answered within 1.5s"):
        store.get("ns", "k")

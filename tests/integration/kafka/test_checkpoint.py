"""The Kafka checkpoint manager against a real broker: Samza's topic format, V1/V2 record types,
corrupt records with validation on and off, and fenced writes."""

from __future__ import annotations

import threading
import time
import uuid

import orjson
import pytest
from confluent_kafka import Producer

from millstream.checkpoint.base import ReadOnlyCheckpointManagerError, WriterFence
from millstream.checkpoint.checkpoint import (
    Checkpoint,
    CheckpointFormatError,
    CheckpointId,
    CheckpointV1,
    CheckpointV2,
)
from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config import Config
from millstream.connectors.kafka.checkpoint import KafkaCheckpointManager, checkpoint_key
from millstream.contracts import coordination
from millstream.contracts.metadata import FencedError
from millstream.model import SystemStreamPartition, TaskName
from tests.integration.kafka.helpers import kafka_config, read_all

pytestmark = pytest.mark.integration

GROUPER = "org.apache.samza.container.grouper.stream.GroupByPartitionFactory"
TASK = TaskName("Partition 0")
OTHER = TaskName("Partition 1")


def offsets(offset: str, partition: int = 0) -> CheckpointV1:
    return CheckpointV1({SystemStreamPartition("kafka", "in", partition): offset})


@pytest.fixture
def config(bootstrap) -> Config:
    return kafka_config(
        bootstrap,
        job__name=f"ckpt-{uuid.uuid4().hex[:8]}",
        task__checkpoint__factory="kafka",
        metadata__store__factory="kafka",
    )


@pytest.fixture
def store(config):
    store = metadata_store(config)
    coordination.publish_generation(store, 1)
    yield store
    store.close()


def manager(config, store, fence=None) -> KafkaCheckpointManager:
    created = checkpoint_manager(config, store, fence)
    assert isinstance(created, KafkaCheckpointManager)
    created.start()
    return created


def writer(config, store, container: str = "0", generation: int = 1) -> KafkaCheckpointManager:
    epoch = coordination.start_container_attempt(store, container)
    return manager(config, store, WriterFence(generation, container, epoch))


def raw_producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap})


def test_checkpoints_are_written_as_samza_keys_and_v1_values_in_a_compacted_topic(config, store, bootstrap):
    ckpt = writer(config, store)
    assert ckpt.read_last_checkpoint(TASK) is None
    ckpt.write_checkpoint(TASK, offsets("41"))
    ckpt.write_checkpoint(TASK, offsets("42"))
    ckpt.write_checkpoint(OTHER, offsets("7", 1))
    assert ckpt.read_last_checkpoint(TASK) == offsets("42")
    assert ckpt.read_all() == {TASK: offsets("42"), OTHER: offsets("7", 1)}
    ckpt.stop()

    topic = f"__millstream-checkpoint-{config['job.name']}-1"
    assert ckpt.topic == topic
    records = read_all(bootstrap, topic, 1)
    assert orjson.loads(records[0].key()) == {
        "systemstreampartition-grouper-factory": GROUPER,
        "taskName": "Partition 0",
        "type": "checkpoint",
    }
    assert records[0].key() == checkpoint_key(GROUPER, "Partition 0")
    assert orjson.loads(records[-1].value()) == {
        "SystemStreamPartition [kafka, in, 1]": {"system": "kafka", "stream": "in", "partition": "1", "offset": "7"}
    }
    from millstream.connectors.kafka.factory import KafkaSystemFactory

    admin = KafkaSystemFactory().get_admin("kafka", config)
    assert admin.get_system_stream_metadata([topic])[topic].partition_count == 1
    assert admin.topic_config(topic)["cleanup.policy"] == "compact"


def test_a_new_manager_reads_the_last_checkpoint_of_every_task_by_scanning_the_topic(config, store):
    ckpt = writer(config, store)
    for offset in range(5):
        ckpt.write_checkpoint(TASK, offsets(str(offset)))
    ckpt.write_checkpoint(OTHER, offsets("9", 1))
    reader = manager(config, store)
    assert reader.read_last_checkpoint(TASK) == offsets("4")
    assert reader.read_last_checkpoint(TaskName("Partition 9")) is None
    ckpt.write_checkpoint(TASK, offsets("5"))
    assert reader.read_last_checkpoint(TASK) == offsets("5"), "a later read sees later writes"
    reader.stop()
    ckpt.stop()


def test_v2_and_unknown_record_types_are_skipped_when_reading_v1(config, store, bootstrap):
    ckpt = writer(config, store)
    ckpt.write_checkpoint(TASK, offsets("10"))
    producer = raw_producer(bootstrap)
    v2 = {"checkpoint-id": "1617000000000-1", "input-offsets": {"kafka.in.0": "99"}, "state-checkpoint-markers": {}}
    producer.produce(ckpt.topic, orjson.dumps(v2), checkpoint_key(GROUPER, "Partition 0", "checkpoint-v2"))
    producer.produce(ckpt.topic, b"whatever", checkpoint_key(GROUPER, "Partition 0", "changelog-mapping"))
    producer.flush(30)
    reader = manager(config, store)
    assert reader.read_last_checkpoint(TASK) == offsets("10")
    assert reader.skipped == 0
    reader.stop()
    ckpt.stop()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (checkpoint_key(GROUPER, "Partition 0"), b"{not json"),
        (checkpoint_key(GROUPER, "Partition 0"), b'{"x": {"system": "kafka"}}'),
        (b"not a json key", b"{}"),
        (b'{"taskName": "Partition 0"}', b"{}"),
    ],
    ids=["bad-json-value", "incomplete-value", "bad-key", "key-without-type"],
)
def test_a_corrupt_record_fails_the_read_or_is_skipped_per_validation(config, store, bootstrap, key, value):
    ckpt = writer(config, store)
    ckpt.write_checkpoint(TASK, offsets("10"))
    producer = raw_producer(bootstrap)
    producer.produce(ckpt.topic, value, key)
    producer.flush(30)
    with pytest.raises(CheckpointFormatError, match=rf"checkpoint topic '{ckpt.topic}' partition 0 offset \d+"):
        manager(config, store).read_last_checkpoint(TASK)
    lenient = config.with_overrides({"task.checkpoint.validation.enabled": "false"})
    reader = manager(lenient, store)
    assert reader.read_last_checkpoint(TASK) == offsets("10"), "the last readable checkpoint stays"
    assert reader.skipped == 1
    reader.stop()
    ckpt.stop()


def test_a_checkpoint_of_another_grouper_fails_the_read_unless_validation_is_off(config, store, bootstrap):
    ckpt = writer(config, store)
    producer = raw_producer(bootstrap)
    other = "org.apache.samza.container.grouper.stream.GroupBySystemStreamPartitionFactory"
    producer.produce(ckpt.topic, offsets("5").to_bytes(), checkpoint_key(other, "Partition 0"))
    producer.flush(30)
    with pytest.raises(CheckpointFormatError, match=r"written with grouper '.*GroupBySystemStreamPartitionFactory'"):
        manager(config, store).read_last_checkpoint(TASK)
    lenient = config.with_overrides({"task.checkpoint.validation.enabled": "false"})
    assert manager(lenient, store).read_last_checkpoint(TASK) == offsets("5")
    ckpt.stop()


def test_a_tombstone_removes_the_checkpoint_and_clear_empties_the_topic(config, store, bootstrap):
    ckpt = writer(config, store)
    ckpt.write_checkpoint(TASK, offsets("1"))
    ckpt.write_checkpoint(OTHER, offsets("2", 1))
    producer = raw_producer(bootstrap)
    producer.produce(ckpt.topic, None, checkpoint_key(GROUPER, "Partition 1"))
    producer.flush(30)
    assert manager(config, store).read_all() == {TASK: offsets("1")}
    ckpt.clear_checkpoints()
    assert manager(config, store).read_all() == {}
    ckpt.write_checkpoint(TASK, offsets("3"))
    assert manager(config, store).read_all() == {TASK: offsets("3")}
    ckpt.stop()


def test_a_manager_without_a_fence_only_reads(config, store):
    with pytest.raises(ReadOnlyCheckpointManagerError, match=r"Partition 0"):
        manager(config, store).write_checkpoint(TASK, offsets("1"))


def test_a_new_attempt_of_the_container_fences_the_previous_one(config, store):
    first = writer(config, store, "0")
    first.write_checkpoint(TASK, offsets("1"))
    second = writer(config, store, "0")
    with pytest.raises(FencedError, match=r"container '0' \(generation 1, attempt 1\) has been superseded"):
        first.write_checkpoint(TASK, offsets("2"))
    second.write_checkpoint(TASK, offsets("3"))
    assert manager(config, store).read_last_checkpoint(TASK) == offsets("3")
    other_container = writer(config, store, "1")
    second.write_checkpoint(TASK, offsets("4"))  # another container's new attempt does not fence this one
    other_container.stop()
    second.stop()


def test_a_new_generation_fences_every_container_of_the_previous_one(config, store):
    old = writer(config, store, "1", generation=1)
    old.write_checkpoint(TASK, offsets("1"))
    coordination.publish_generation(store, 2)
    with pytest.raises(FencedError, match=r"generation 1"):
        old.write_checkpoint(TASK, offsets("2"))
    assert manager(config, store).read_last_checkpoint(TASK) == offsets("1")


def test_a_new_attempt_aborts_the_open_transaction_of_a_zombie_at_once(config, store):
    zombie = writer(config, store, "0")
    zombie.write_checkpoint(TASK, offsets("1"))
    transaction = zombie._open_writer(time.monotonic() + 30)
    transaction.begin()
    transaction.append([(checkpoint_key(GROUPER, "Partition 0"), offsets("666").to_bytes())], time.monotonic() + 30)
    successor = writer(config, store, "0")  # same container id: its producer aborts the zombie's transaction
    assert successor.read_last_checkpoint(TASK) == offsets("1")
    with pytest.raises(Exception, match=r"fenced|Fenced"):
        transaction.commit(time.monotonic() + 30)
    assert manager(config, store).read_last_checkpoint(TASK) == offsets("1")
    successor.stop()


def test_a_reader_waits_for_an_open_checkpoint_transaction_and_never_sees_it_when_it_is_aborted(config, store):
    old = writer(config, store, "1")
    old.write_checkpoint(TASK, offsets("1"))
    transaction = old._open_writer(time.monotonic() + 30)
    transaction.begin()
    transaction.append([(checkpoint_key(GROUPER, "Partition 0"), offsets("2").to_bytes())], time.monotonic() + 30)
    coordination.publish_generation(store, 2)  # a new generation: the old container's check will fail
    result: dict = {}
    reader = manager(config, store)
    thread = threading.Thread(target=lambda: result.setdefault("read", reader.read_last_checkpoint(TASK)))
    thread.start()
    thread.join(1.0)
    assert thread.is_alive(), "the read waits for the open transaction to be decided"
    assert old.fence is not None and not old.fence.is_current(old.store)
    transaction.abort(time.monotonic() + 30)
    thread.join(30)
    assert result["read"] == offsets("1")
    old.stop()


def test_a_reader_of_a_job_that_never_checkpointed_reads_nothing_and_creates_nothing(config, store):
    from millstream.connectors.kafka.factory import KafkaSystemFactory

    reader = manager(config, store)
    assert reader.read_all() == {}
    assert reader.read_last_checkpoint(TASK) is None
    admin = KafkaSystemFactory().get_admin("kafka", config)
    assert admin.get_system_stream_metadata([reader.topic]) == {}


def test_v2_checkpoints_are_written_as_checkpoint_v2_records_and_read_per_read_versions(config, store, bootstrap):
    from millstream.checkpoint.checkpoint import CheckpointId, CheckpointV2

    ckpt = writer(config, store)
    v1 = offsets("10")
    v2 = CheckpointV2(CheckpointId(1_700_000_000_000, 1), {SystemStreamPartition("kafka", "in", 0): "12"}, {})
    ckpt.write_checkpoint(TASK, v1)
    ckpt.write_checkpoint(TASK, v2)
    records = read_all(bootstrap, ckpt.topic, 1)
    assert [orjson.loads(m.key())["type"] for m in records] == ["checkpoint", "checkpoint-v2"]
    assert orjson.loads(records[1].value())["input-offsets"] == {"kafka.in.0": "12"}

    assert manager(config, store).read_last_checkpoint(TASK) == v1, "read.versions defaults to 1"
    v2_first = config.with_overrides({"task.checkpoint.read.versions": "2,1"})
    assert manager(v2_first, store).read_last_checkpoint(TASK) == v2
    assert manager(v2_first, store).read_all() == {TASK: v2}
    # A V1 written long after the V2 wins over the stale V2 (a rollback to V1 then forward again).
    stale = v2_first.with_overrides({"task.live.checkpoint.max.age.ms": "0"})
    time.sleep(0.01)
    ckpt.write_checkpoint(TASK, offsets("20"))
    assert manager(stale, store).read_last_checkpoint(TASK) == offsets("20")
    assert manager(v2_first, store).read_last_checkpoint(TASK) == v2


def test_a_corrupt_record_of_a_version_not_read_is_not_even_parsed(config, store, bootstrap):
    ckpt = writer(config, store)
    ckpt.write_checkpoint(TASK, offsets("10"))
    producer = raw_producer(bootstrap)
    producer.produce(ckpt.topic, b"{not json", checkpoint_key(GROUPER, "Partition 0", "checkpoint-v2"))
    producer.flush(30)
    assert manager(config, store).read_last_checkpoint(TASK) == offsets("10")
    with pytest.raises(CheckpointFormatError, match="not a valid V2 checkpoint"):
        manager(config.with_overrides({"task.checkpoint.read.versions": "2,1"}), store).read_last_checkpoint(TASK)


def test_tasks_of_one_container_committing_at_once_all_land_in_the_checkpoint_topic(config, store):
    """A container's tasks finish their commits on a thread pool and share the container's one
    transactional producer: concurrent writes must each land, in order per task, and none fence the writer."""
    shared = writer(config, store, "0")
    tasks = [TaskName(f"Partition {p}") for p in range(4)]
    rounds = 25
    start = threading.Barrier(len(tasks))
    failures: list[BaseException] = []

    def commit_rounds(task: TaskName, partition: int) -> None:
        start.wait()
        try:
            for offset in range(rounds):
                shared.write_checkpoint(task, offsets(str(offset), partition))
        except BaseException as error:  # reported below with the task's name
            failures.append(error)

    threads = [threading.Thread(target=commit_rounds, args=(task, p)) for p, task in enumerate(tasks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    assert manager(config, store).read_all() == {
        task: offsets(str(rounds - 1), partition) for partition, task in enumerate(tasks)
    }
    shared.write_checkpoint(tasks[0], offsets(str(rounds), 0))  # the writer is still the container's current one
    shared.stop()


def test_a_batch_of_many_tasks_checkpoints_is_one_transaction_of_a_record_per_task_and_version(config, store):
    """A commit round's group (``CheckpointGroupCommit``) costs one transaction and one flush, in Samza's format:
    the batch's records sit at consecutive offsets (a transaction per task would put a commit marker between
    each), and each task reads back its own."""
    both = config.with_overrides({"task.checkpoint.read.versions": "2,1"})
    shared = writer(both, store, "0")
    tasks = [TaskName(f"Partition {p}") for p in range(50)]
    batch: list[tuple[TaskName, Checkpoint]] = []
    for partition, task in enumerate(tasks):
        v2 = CheckpointV2(CheckpointId.create(), {SystemStreamPartition("kafka", "in", partition): "7"}, {})
        batch += [(task, v2), (task, offsets("7", partition))]
    assert shared.write_batch(batch) == {}
    reader = manager(both, store)
    assert {task: checkpoint.offsets for task, checkpoint in reader.read_all().items()} == {
        task: {SystemStreamPartition("kafka", "in", partition): "7"} for partition, task in enumerate(tasks)
    }
    at = sorted(offset for versions in reader._latest.values() for offset, _, _ in versions.values())
    assert at == list(range(at[0], at[0] + len(batch))), "the batch's records were not written in one transaction"
    shared.stop()

"""On the real broker: a superseded attempt of a container that keeps running cannot get its changelog
writes covered by the newer attempt's checkpoints. The newer attempt's transactional producer fences it
(same ``transactional.id``): its open transaction is aborted, its next commit raises, and a restore from
the newer attempt's checkpoint — reading committed records only — gives exactly the fault-free counts."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.connectors.kafka.factory import MAX_TRANSACTION_TIMEOUT_MS, transaction_timeout_ms
from millstream.connectors.kafka.producer import SERVE_EVERY, KafkaSystemProducer
from millstream.contracts.systems import WriterFencedError, WriterToken
from millstream.coordinator.job_coordinator import JobCoordinator
from millstream.coordinator.prepare import prepare
from millstream.model import (
    IncomingMessageEnvelope,
    OutgoingMessageEnvelope,
    SystemStream,
    SystemStreamPartition,
    TaskName,
)
from millstream.runtime.process_errors import ProcessErrorPolicy
from millstream.testing import InProcessRunner, read_stream, write_stream
from tests.api.test_in_process import run_in_background
from tests.helpers import create_stream, seal, wait_until
from tests.integration.kafka.helpers import SYSTEM, create_topic, kafka_config
from tests.integration.kafka.test_spark_local import RunningJob
from tests.runtime.test_zombie_attempts import (
    KEYS,
    checkpointed_offset,
    in_background,
    reported_stores,
    run_with_a_zombie,
)
from tests.storage.harness import state_config

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("factory", ["inmemory", "rocksdb"])
def test_a_zombie_attempts_kafka_changelog_writes_are_aborted_and_a_restore_gives_exact_counts(
    tmp_path: Path, bootstrap: str, topic_name: Callable[[str], str], factory: str
) -> None:
    job = f"zombie-{uuid.uuid4().hex[:8]}"
    config, zombie_error, restored = run_with_a_zombie(
        tmp_path,
        factory,
        job__name=job,
        stores__counts__changelog=f"kafka.{topic_name('changelog')}",
        systems__kafka__samza__factory="kafka",
        systems__kafka__bootstrap__servers=bootstrap,
        # its commit runs on the task's thread, straight after its batch, and flushes the Kafka changelog before its
        # output on the log: the zombie meets its fence there (beside processing, the run loop would append the
        # output once its input is drained, meeting the log's fence first while the commit thread meets Kafka's)
        task__commit__snapshot__beside__processing__enabled="false",
    )
    assert restored.outcome == "finished"
    *_, restored_store = reported_stores(config)
    assert restored_store == dict(Counter(f"k{value % KEYS}" for value in range(200)) | Counter({"late": 5}))
    assert isinstance(zombie_error, WriterFencedError), zombie_error
    assert f"transactional.id millstream-producer-{job}-1-0: container 0 attempt 1 of generation 1" in str(zombie_error)


def test_a_containers_transaction_outlives_its_commit_interval_within_what_brokers_accept() -> None:
    assert transaction_timeout_ms(60_000) == 180_000  # the default task.commit.ms
    assert transaction_timeout_ms(200) == 60_000
    assert transaction_timeout_ms(3_600_000) == MAX_TRANSACTION_TIMEOUT_MS


MOVED = TaskName("Partition 1")
MOVED_INPUT = SystemStreamPartition("log", "in", 1)
EXPECTED = dict(Counter(f"k{value % KEYS}" for value in range(200)) | Counter({"late": 5}))


def moved_task_job(tmp_path: Path, bootstrap: str, job: str, changelog: str, containers: int) -> Settings:
    """Task ``Partition 1`` (its input: 200 records) runs in container 1 of 2, or in container 0 of 1."""
    return prepare(
        state_config(
            tmp_path,
            "changelog",
            task="tests.storage.jobs:CountPerKeyHeldOnce",
            stores__counts__factory="inmemory",
            stores__counts__changelog=f"kafka.{changelog}",
            systems__kafka__samza__factory="kafka",
            systems__kafka__bootstrap__servers=bootstrap,
            job__name=job,
            job__container__count=containers,
            test__hold__dir=tmp_path / "hold",
            test__hold__offset=100,
            test__hold__commit__offset=150,
        )
    )


def moved_task_jobs(tmp_path: Path, bootstrap: str, changelog: str) -> tuple[Settings, Settings]:
    """The job with two containers (the first run) and with one (the second), its input written."""
    job = f"moved-{uuid.uuid4().hex[:8]}"
    (tmp_path / "hold").mkdir()
    first = moved_task_job(tmp_path, bootstrap, job, changelog, containers=2)
    create_stream(first, "in", 2)
    create_stream(first, "out", 1)
    write_stream(first, SystemStream("log", "in"), [(f"k{v % KEYS}", v) for v in range(200)], partition=1)
    return first, moved_task_job(tmp_path, bootstrap, job, changelog, containers=1)


def at_offset(config: Settings, offset: int, current: threading.Thread) -> None:
    """Wait until the moved task's checkpoint names ``offset`` (or the run ``current`` ended)."""
    wait_until(
        lambda: checkpointed_offset(config, MOVED, MOVED_INPUT) == offset or not current.is_alive(),
        60,
        f"the moved task checkpointed at {offset}",
    )


def finish_and_restore(config: Settings, current: threading.Thread) -> dict[str, int]:
    """Late records for the new owner, then end-of-stream; a last run restores and reports the store."""
    write_stream(config, SystemStream("log", "in"), [("late", v) for v in range(200, 205)], partition=1)
    at_offset(config, 204, current)
    seal(config, "in")
    current.join(60)
    assert InProcessRunner(config).run(timeout=60).outcome == "finished"
    reports = [value for _, value in read_stream(config, SystemStream("log", "out"))[0] if isinstance(value, dict)]
    return [report["store"] for report in reports if report.get("task") == str(MOVED)][-1]


def test_a_zombie_of_the_previous_generation_whose_task_moved_to_another_container_is_fenced_on_kafka(
    tmp_path: Path, bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    """Generation 2 moves the task from container 1 to container 0, whose transactional.id differs: when it
    publishes generation 2 the coordinator fences generation 1's producers, so the held container's open
    transaction is aborted, nothing it writes afterwards is committed (not even by the producer's flush
    when it hands over), and generation 2's checkpoints never cover stale changelog records."""
    first, second = moved_task_jobs(tmp_path, bootstrap, topic_name("changelog"))
    with metadata_store(first) as store:
        generation_1 = JobCoordinator(first, store).start()
    zombie, zombie_outcome = in_background(first, generation_1, "1")
    wait_until(lambda: (tmp_path / "hold" / "held").exists(), 60, "generation 1's container 1 held at offset 100")
    with metadata_store(second) as store:
        generation_2 = JobCoordinator(second, store).start()
    assert MOVED in generation_2.containers["0"].tasks
    current, current_outcome = in_background(second, generation_2, "0")
    at_offset(second, 199, current)
    (tmp_path / "hold" / "release").touch()
    zombie.join(60)
    assert not zombie.is_alive(), "the zombie container did not stop"
    assert finish_and_restore(second, current) == EXPECTED
    assert current_outcome.get("result") is not None, current_outcome.get("error")
    assert zombie_outcome.get("result") is not None, zombie_outcome.get("error")
    assert zombie_outcome["result"].outcome == "superseded"  # fenced: handed over without a final commit


def test_a_superseded_spark_container_whose_task_moved_to_another_container_writes_nothing_to_kafka(
    spark: Any,
    tmp_path: Path,
    bootstrap: str,
    topic_name: Callable[[str], str],
) -> None:
    """The same through the Spark runner: its container 1 is the zombie, a second run takes the task over."""
    first, second = moved_task_jobs(tmp_path, bootstrap, topic_name("changelog"))
    spark_run = RunningJob(first, spark)
    wait_until(lambda: (tmp_path / "hold" / "held").exists(), 120, "the Spark container 1 held at offset 100")
    _runner, current, results = run_in_background(second)
    at_offset(second, 199, current)
    (tmp_path / "hold" / "release").touch()
    spark_run.thread.join(120)
    assert not spark_run.thread.is_alive(), "the superseded Spark run did not end"
    assert spark_run.outcome["result"].outcome == "superseded", spark_run.outcome
    assert finish_and_restore(second, current) == EXPECTED
    assert results["result"].outcome == "finished", results["result"].error


def _transactional_producer(bootstrap: str, writer: WriterToken) -> KafkaSystemProducer:
    config = kafka_config(bootstrap)
    producer = system_factory(config, SYSTEM).get_producer(SYSTEM, config)  # bound: its fence check opens the store
    assert isinstance(producer, KafkaSystemProducer)
    producer.set_writer(writer)
    producer.start()
    return producer


def _send_until_refused(producer: KafkaSystemProducer, envelope: OutgoingMessageEnvelope, batch: bool) -> Exception:
    """Send as a busy zombie does until the producer refuses: librdkafka learns of the fence from the broker's
    answer to a produce request, while sends go on; then a produce or a poll of its callbacks raises."""
    for _ in range(2_000_000 // SERVE_EVERY):
        try:
            if batch:
                producer.send_batch("zombie", envelope.system_stream, [envelope.message] * SERVE_EVERY, None)
            else:
                for _ in range(SERVE_EVERY):
                    producer.send("zombie", envelope)
        except Exception as error:  # what the task loop hands to the process-error policy
            return error
    raise AssertionError("2,000,000 sends of a fenced producer were all accepted")


@pytest.mark.parametrize("batch", [False, True], ids=["send", "send_batch"])
def test_an_older_attempts_sends_after_a_newer_attempt_took_its_transactional_id_raise_the_fence(
    bootstrap: str, topic_name: Callable[[str], str], batch: bool
) -> None:
    """Two producers with one transactional.id, the older one keeps sending: whether the fence shows at a produce
    call or in a poll of librdkafka's callbacks, it is a ``WriterFencedError`` naming the attempt, so the
    process-error policy (which would skip a user's error) fails the container with it."""
    topic = topic_name("out")
    create_topic(bootstrap, topic)
    job = f"fence-{uuid.uuid4().hex[:8]}"
    older = _transactional_producer(bootstrap, WriterToken(job, "0", 1, 1))
    newer = _transactional_producer(bootstrap, WriterToken(job, "0", 1, 2))
    envelope = OutgoingMessageEnvelope(SystemStream(SYSTEM, topic), b"late", b"k")
    try:
        raised = _send_until_refused(older, envelope, batch)
    finally:
        newer.stop()
    assert isinstance(raised, WriterFencedError), repr(raised)
    assert f"transactional.id millstream-producer-{job}-0: container 0 attempt 1 of generation 1" in str(raised)
    policy = ProcessErrorPolicy(mode="skip")
    incoming = IncomingMessageEnvelope(SystemStreamPartition(SYSTEM, "in", 0), "7", b"k", b"v")
    with pytest.raises(WriterFencedError):
        policy.on_process_error(TaskName("Partition 0"), incoming, raised)
    assert policy.skipped == 0
    with pytest.raises(WriterFencedError):
        older.send("zombie", envelope)  # fenced for good

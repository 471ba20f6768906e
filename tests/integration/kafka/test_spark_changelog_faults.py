"""Issue 37 through the Spark runner: a stateful count-per-key job, Kafka to Kafka with its store's changelog on
Kafka, all through a black-hole proxy. A commit after checkpoint A pauses after its producers' flush (testing
pause point ``before-snapshot``); the test black-holes the broker there, so the snapshot cannot read the
changelog's newest offset. The commit must fail the container (never checkpoint an empty store); Spark retries
it, the retry restores from A, and every key's final count is exact. Checkpoints and metadata stay in the local
metadata store, so the test watches the container through the black hole."""

from __future__ import annotations

import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import KafkaError, KafkaException
from pyspark.sql import SparkSession

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.model import TaskName
from tests.helpers import wait_until
from tests.integration.conftest import ProxiedKafka
from tests.integration.kafka.fault_jobs import BLACK_HOLED, LISTING_OFFSETS
from tests.integration.kafka.helpers import create_topic, job_config, produce, read_all
from tests.integration.kafka.test_spark_local import RunningJob
from tests.integration.network import BlackHoleProxy
from tests.storage.harness import restored_contents

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 1
"""One task: its commit paused at ``before-snapshot`` is the only one to meet the black hole. A commit is made
beside processing (``task.commit.snapshot.beside.processing.enabled``, the default), so only that task's commit
thread pauses; a second task would go on committing and its own flush, failing past the outage deadline, could
fail the container before the paused snapshot does."""
KEYS_PER_PARTITION = 4
MESSAGES_PER_KEY = 200
OPERATION_TIMEOUT_MS = 3000
PAUSE_POINT = "before-snapshot"


def input_records(counts: range = range(MESSAGES_PER_KEY)) -> dict[int, list[tuple[bytes, bytes]]]:
    """Per input partition, its messages numbered ``counts`` (all by default): keys ``p<partition>-k<n>`` in turn."""
    return {
        partition: [(f"p{partition}-k{n}".encode(), orjson.dumps(i)) for i in counts for n in range(KEYS_PER_PARTITION)]
        for partition in range(PARTITIONS)
    }


FIRST_HALF, SECOND_HALF = range(MESSAGES_PER_KEY // 2), range(MESSAGES_PER_KEY // 2, MESSAGES_PER_KEY)
"""The input comes in two halves: the second is produced only once the pause is armed, so a commit with new
offsets always follows it (commits that move nothing are skipped and never reach the pause point), however late
the test sees checkpoint A on a loaded machine."""


def produce_input(bootstrap: str, source: str, counts: range) -> None:
    for partition, records in input_records(counts).items():
        produce(bootstrap, source, records, partition=partition)


TASK_CLASSES = {
    "before-the-snapshot": "tests.integration.kafka.jobs:KafkaCountPerKey",
    "during-list-offsets": "tests.integration.kafka.fault_jobs:CountPerKeyHeldBeforeListOffsets",
}
"""When the black hole begins: during the ``before-snapshot`` pause (the snapshot's requests fail until the outage
deadline), or as the snapshot's ListOffsets requests go out (issue 37 exactly: librdkafka answers offset -1001
instead of an error). Either way the admin knows the changelog's partitions from the earlier commits."""
FAILURES = {"before-the-snapshot": "systems.kafka.outage.timeout.ms", "during-list-offsets": "no offset for"}
"""What the failed commit's error says the snapshot could not do."""


def faults_config(tmp_path: Path, kafka: ProxiedKafka, topics: tuple[str, str, str], start: str) -> Settings:
    source, sink, changelog = topics
    return job_config(
        kafka.bootstrap_servers,
        tmp_path / "data",
        source,
        sink,
        job__name=f"faults-{uuid.uuid4().hex[:8]}",
        task__class=TASK_CLASSES[start],
        task__checkpoint__factory="metadata",  # the checkpoints and the container's status stay readable
        metadata__store__factory="sqlite",
        stores__counts__factory="rocksdb",
        stores__counts__key__serde="string",
        stores__counts__msg__serde="json",
        stores__counts__changelog=f"kafka.{changelog}",
        systems__kafka__operation__timeout__ms=OPERATION_TIMEOUT_MS,
        systems__kafka__outage__timeout__ms=OPERATION_TIMEOUT_MS,  # the cut outlasts it: the commit fails
        job__container__count=1,
        job__container__retry__count=3,
        task__commit__ms=300,
        task__commit__testing__pause__at=PAUSE_POINT,
        task__commit__testing__pause__ms=2000,
        task__commit__testing__marker__dir=str(tmp_path / "markers"),
        test__changelog=changelog,
        test__delay__seconds=0.005,  # the input lasts several commits: the paused one comes after checkpoint A
    )


def checkpointed_messages(config: Settings, source: str) -> int:
    """How many input messages the tasks' last checkpoints cover."""
    store = metadata_store(config)
    store.init()
    try:
        checkpoints = checkpoint_manager(config, store).read_all()
        return sum(
            int(offset) + 1
            for checkpoint in checkpoints.values()
            for ssp, offset in checkpoint.offsets.items()
            if ssp.stream == source and offset is not None
        )
    finally:
        store.close()


def container_status(config: Settings) -> dict[str, Any]:
    store = metadata_store(config)
    store.init()
    try:
        return coordination.container_statuses(store).get("0", {})
    finally:
        store.close()


def final_counts(bootstrap: str, sink: str) -> dict[str, list[int]]:
    """Per key, the counts the job sent, in the order it sent them (committed output only)."""
    counts: dict[str, list[int]] = defaultdict(list)
    for message in read_all(bootstrap, sink, PARTITIONS, isolation="read_committed"):
        record = orjson.loads(message.value())
        counts[record["key"]].append(record["count"])
    return counts


def expected_counts() -> dict[str, int]:
    return {f"p{p}-k{n}": MESSAGES_PER_KEY for p in range(PARTITIONS) for n in range(KEYS_PER_PARTITION)}


LEADERS_MOVING = frozenset(
    {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TRANSPORT, KafkaError._TIMED_OUT}
)


def every_key_counted(bootstrap: str, sink: str) -> bool:
    """Whether the output holds every key's final count; not yet while the test's own reader meets a broker that
    is still electing its leaders after a restart (a retriable error is a "not yet", as for the job)."""
    try:
        counts = final_counts(bootstrap, sink)
    except KafkaException as error:
        if not (error.args[0].retriable() or error.args[0].code() in LEADERS_MOVING):
            raise
        return False
    return {key: sent[-1] for key, sent in counts.items() if sent} == expected_counts()


def failed_first_attempt(config: Settings) -> dict[str, Any] | None:
    """Container 0's status once its first attempt has reported its failure. Reported before the attempt closes
    its Kafka clients, which the black hole holds up: the retry cannot replace it before the test has seen it."""
    status = container_status(config)
    return status if status.get("state") == "failed" and status.get("attempt") == 1 else None


def black_hole_the_paused_commit(config: Settings, proxy: BlackHoleProxy, start: str) -> dict[str, Any]:
    """Black-hole the broker from ``start`` in the commit paused at ``before-snapshot`` until container 0's first
    attempt has reported its failure; returns that report."""
    markers = Path(config["task.commit.testing.marker.dir"])
    wait_until((markers / PAUSE_POINT).exists, 60, f"a commit paused at {PAUSE_POINT}")
    if start == "during-list-offsets":
        wait_until((markers / LISTING_OFFSETS).exists, 60, "the paused snapshot to read the changelog's metadata")
    with proxy.cut():  # longer than the operation timeout: until the commit has failed
        (markers / BLACK_HOLED).touch()
        failure = wait_until(lambda: failed_first_attempt(config), 120, "container 0's first attempt to report failure")
    assert failure is not None
    return failure


@pytest.mark.parametrize("start", list(TASK_CLASSES))
def test_a_commit_that_cannot_read_the_changelog_offset_fails_the_container_and_its_retry_keeps_every_count_exact(
    tmp_path: Path, kafka_proxy: ProxiedKafka, topic_name: Any, spark: SparkSession, start: str
) -> None:
    bootstrap = kafka_proxy.bootstrap_servers
    source, sink, changelog = topics = topic_name("in"), topic_name("out"), topic_name("counts")
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, PARTITIONS)
    produce_input(bootstrap, source, FIRST_HALF)
    config = faults_config(tmp_path, kafka_proxy, topics, start)
    marker = tmp_path / "markers" / PAUSE_POINT
    marker.parent.mkdir()
    marker.write_text("held by the test until checkpoint A")  # no commit pauses before it is removed

    job = RunningJob(config, spark)
    try:
        wait_until(lambda: checkpointed_messages(config, source) > 0, 120, "checkpoint A, after some input")
        marker.unlink()  # the next commit that moves the offsets pauses after its producers' flush
        produce_input(bootstrap, source, SECOND_HALF)
        failure = black_hole_the_paused_commit(config, kafka_proxy.proxy, start)
        wait_until(lambda: every_key_counted(bootstrap, sink), 300, "every key's final count in the output")
        # the failed attempt processed on beside its paused commit and may have sent every final count itself:
        # the job is done once its retry has checkpointed all the input too
        total = PARTITIONS * KEYS_PER_PARTITION * MESSAGES_PER_KEY
        wait_until(lambda: checkpointed_messages(config, source) == total, 300, "every input message checkpointed")
    finally:
        result = job.stop(timeout=180)

    assert result.outcome == "stopped", result.error
    assert [container.epoch for container in result.containers] != [1], "the failed container was retried"
    assert "StateBackupError" in failure["error"] and "'counts'" in failure["error"], failure
    assert changelog in failure["error"] and "no checkpoint is written" in failure["error"], failure
    assert FAILURES[start] in failure["error"], failure
    counts = final_counts(bootstrap, sink)
    assert {key: sent[-1] for key, sent in counts.items()} == expected_counts()
    assert all(sorted(set(sent)) == list(range(1, MESSAGES_PER_KEY + 1)) for sent in counts.values()), "no gap"
    for partition in range(PARTITIONS):
        want = {key: n for key, n in expected_counts().items() if key.startswith(f"p{partition}-")}
        task = TaskName(f"Partition {partition}")
        assert restored_contents(config, task, tmp_path / f"new-host-{partition}") == want

"""Issue 37 at the storage level, on a real broker behind a black-hole proxy: a commit that cannot read its
changelog's newest offset fails naming the task, store and partition; it never records an "empty" changelog
marker, so no checkpoint B is written, a restore from the last checkpoint gives exactly its state, and the
next commit after the network heals checkpoints everything. The Kafka checkpoint reader fails the same way
instead of answering "no checkpoint"."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from millstream.checkpoint.base import CheckpointManager, WriterFence
from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId, CheckpointV1
from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.connectors.kafka import checkpoint as kafka_checkpoint
from millstream.connectors.kafka.admin import KafkaSystemAdmin
from millstream.connectors.kafka.errors import KafkaSystemError
from millstream.connectors.kafka.replicated_log import ReplicatedLogTimeoutError
from millstream.contracts import coordination
from millstream.contracts.metadata import MetadataStore
from millstream.model import SystemStreamPartition
from millstream.runtime.services import ContainerServices
from millstream.storage.errors import StateBackupError
from millstream.storage.managers.stores import ContainerStorageManager
from tests.integration.conftest import ProxiedKafka
from tests.integration.kafka.helpers import kafka_config
from tests.integration.network import BlackHoleProxy
from tests.storage.harness import TASK, Opened, StateHarness, state_config

pytestmark = pytest.mark.integration

OPERATION_TIMEOUT_MS = 3000
"""Short, and the outage deadline as short, so a black-holed metadata call gives up within seconds instead of
riding the cut out."""


def keys(start: int, stop: int) -> dict[str, int]:
    return {f"k{i}": i for i in range(start, stop)}


def changelog_config(tmp_path: Path, bootstrap: str, changelog: str) -> Settings:
    return state_config(
        tmp_path,
        "changelog",
        job__name=f"faults-{uuid.uuid4().hex[:8]}",
        stores__counts__changelog=f"kafka.{changelog}",
        systems__kafka__samza__factory="kafka",
        systems__kafka__bootstrap__servers=bootstrap,
        systems__kafka__operation__timeout__ms=OPERATION_TIMEOUT_MS,
        systems__kafka__outage__timeout__ms=OPERATION_TIMEOUT_MS,
    )


def checkpoint_writer(config: Settings, store: MetadataStore) -> CheckpointManager:
    """A checkpoint manager writing as the first attempt of container 0 of the current generation."""
    if coordination.current_generation(store) == 0:
        coordination.publish_generation(store, 1)
    fence = WriterFence(coordination.current_generation(store), "0", coordination.start_container_attempt(store, "0"))
    manager = checkpoint_manager(config, store, fence)
    manager.start()
    return manager


def commit_and_checkpoint(harness: StateHarness, opened: Opened, manager: CheckpointManager) -> CheckpointV1:
    """A whole commit, its V1 and V2 checkpoints written through the job's checkpoint manager; returns the V1,
    which is what the job reads back (``task.checkpoint.read.versions`` defaults to 1)."""
    checkpoint = harness.commit(opened)
    assert checkpoint is not None
    manager.write_checkpoint(TASK, harness.v1)
    manager.write_checkpoint(TASK, checkpoint)
    return harness.v1


def restored_on_a_new_host(harness: StateHarness, fresh_dir: Path) -> dict[Any, Any]:
    """Restore the task's store from the last checkpoint the checkpoint manager holds into ``fresh_dir``."""
    config = harness.config.with_overrides(
        {"job.logged.store.base.dir": str(fresh_dir / "logged"), "job.non-logged.store.base.dir": str(fresh_dir / "n")}
    )
    metadata = metadata_store(config)
    metadata.init()
    checkpoint = checkpoint_manager(config, metadata).read_last_checkpoint(TASK)
    services = ContainerServices(config)
    container = ContainerStorageManager(config, harness.model, "0", metadata, services)
    storage = container.task_storage(TASK, harness.model.tasks[TASK])
    assert storage is not None
    try:
        container.restore({TASK: (storage, checkpoint)})
        return dict(storage.stores["counts"].all())
    finally:
        storage.close()
        container.close()
        services.close()


def last_checkpoint(harness: StateHarness) -> Checkpoint | None:
    return checkpoint_manager(harness.config, harness.metadata).read_last_checkpoint(TASK)


@dataclass
class ChangelogTask:
    harness: StateHarness
    opened: Opened
    checkpoints: CheckpointManager
    changelog: SystemStreamPartition


@pytest.fixture
def changelog_task(
    tmp_path: Path, kafka_proxy: ProxiedKafka, topic_name: Callable[[str], str]
) -> Iterator[ChangelogTask]:
    """Task 0 of a job whose store ``counts`` has its changelog on the proxied broker, its storage open."""
    changelog = topic_name("changelog")
    harness = StateHarness(changelog_config(tmp_path, kafka_proxy.bootstrap_servers, changelog))
    checkpoints = checkpoint_writer(harness.config, harness.metadata)
    task = ChangelogTask(harness, harness.open(), checkpoints, SystemStreamPartition("kafka", changelog, 0))
    try:
        yield task
    finally:
        kafka_proxy.proxy.heal()
        checkpoints.stop()
        task.opened.close()


BlackHoleStart = Literal["before-the-snapshot", "during-list-offsets"]
"""When the black hole begins: before the snapshot asks anything, or as its ListOffsets requests go out, the
changelog's partitions known (issue 37 exactly:
librdkafka then answers offset -1001 instead of an error)."""


@contextlib.contextmanager
def black_holed(proxy: BlackHoleProxy, start: BlackHoleStart) -> Iterator[list[str]]:
    """Black-hole the broker from ``start`` until the block ends; yields the topics whose metadata a
    snapshot read before a ``during-list-offsets`` black hole began (empty: it never began)."""
    described: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        if start == "before-the-snapshot":
            proxy.black_hole()
        else:
            original = KafkaSystemAdmin._list_offsets

            def black_hole_then(admin: KafkaSystemAdmin, specs: Mapping[Any, Any], *args: Any, **kwargs: Any) -> Any:
                # the admin knows the changelog's partitions already (it read them at the first commit and
                # remembers them): the snapshot's first request is its ListOffsets, sent into the black hole
                if not described:
                    described.extend(sorted({tp.topic for tp in specs}))
                    proxy.black_hole()
                return original(admin, specs, *args, **kwargs)

            patch.setattr(KafkaSystemAdmin, "_list_offsets", black_hole_then)
        try:
            yield described
        finally:
            proxy.heal()


def fail_a_snapshot_under_a_black_hole(
    task: ChangelogTask, proxy: BlackHoleProxy, start: BlackHoleStart
) -> CheckpointV1:
    """Commit 1 with 300 keys (checkpoint A), 100 more keys written to the changelog and flushed, then a
    snapshot while the broker is black-holed from ``start``: it must fail naming the task, store, partition
    and cause, and leave A the last checkpoint. Returns A."""
    harness, opened = task.harness, task.opened
    for key, value in keys(0, 300).items():
        opened.store.put(key, value)
    checkpoint_a = commit_and_checkpoint(harness, opened, task.checkpoints)
    assert str(checkpoint_a.offsets[task.changelog]).endswith(":299"), checkpoint_a
    for key, value in keys(300, 400).items():
        opened.store.put(key, value)
    opened.storage.write_back()
    opened.producers.flush(TASK)  # every change is in the changelog: only reading its position fails

    with black_holed(proxy, start) as described, pytest.raises(StateBackupError) as failed:
        opened.storage.snapshot(CheckpointId.create())

    message = str(failed.value)
    if start == "during-list-offsets":
        assert described == [task.changelog.stream], "the black hole began after the changelog's metadata was read"
        assert "no offset for" in message, f"ListOffsets without an offset is the failure: {message}"
    assert f"task '{TASK}'" in message and "'counts'" in message and str(task.changelog) in message, message
    assert isinstance(failed.value.__cause__, KafkaSystemError), repr(failed.value.__cause__)
    assert last_checkpoint(harness) == checkpoint_a, "no checkpoint may follow the failed snapshot"
    return checkpoint_a


@pytest.mark.parametrize("start", ["before-the-snapshot", "during-list-offsets"])
def test_a_failed_changelog_snapshot_leaves_checkpoint_a_and_the_retried_container_restores_then_commits_all(
    tmp_path: Path, kafka_proxy: ProxiedKafka, changelog_task: ChangelogTask, start: BlackHoleStart
) -> None:
    """The default policy: the commit's failure fails the container; its next attempt restores A (300 keys,
    never an empty store), processes the 100 updates again, and its commit checkpoints all 400."""
    fail_a_snapshot_under_a_black_hole(changelog_task, kafka_proxy.proxy, start)
    changelog_task.opened.close()  # the failed container goes away without another commit
    assert restored_on_a_new_host(changelog_task.harness, tmp_path / "host-after-failure") == keys(0, 300)

    retried = changelog_task.opened = changelog_task.harness.open()  # its next attempt, on the old host
    assert dict(retried.store.all()) == keys(0, 300)
    for key, value in keys(300, 400).items():
        retried.store.put(key, value)
    commit_and_checkpoint(changelog_task.harness, retried, changelog_task.checkpoints)
    assert restored_on_a_new_host(changelog_task.harness, tmp_path / "host-after-commit-3") == keys(0, 400)


def test_after_a_tolerated_changelog_snapshot_failure_the_next_commit_checkpoints_every_update(
    tmp_path: Path, kafka_proxy: ProxiedKafka, changelog_task: ChangelogTask
) -> None:
    """``task.commit.skip.commit.during.failures.enabled``: the task goes on after the failed snapshot, and
    its next commit, the network healed, records the changelog's end: a restore gives all 400 keys."""
    fail_a_snapshot_under_a_black_hole(changelog_task, kafka_proxy.proxy, "during-list-offsets")
    commit_and_checkpoint(changelog_task.harness, changelog_task.opened, changelog_task.checkpoints)
    assert restored_on_a_new_host(changelog_task.harness, tmp_path / "host-after-commit-3") == keys(0, 400)


READ_TIMEOUT_S = 8.0
"""The checkpoint reader's deadline in the test (120 s in production): long enough for a couple of
ListOffsets attempts of ``OPERATION_TIMEOUT_MS``, short enough for a test."""


def test_the_kafka_checkpoint_reader_fails_under_a_black_hole_instead_of_reading_no_checkpoint(
    kafka_proxy: ProxiedKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = kafka_config(
        kafka_proxy.bootstrap_servers,
        job__name=f"faults-{uuid.uuid4().hex[:8]}",
        task__checkpoint__factory="kafka",
        task__checkpoint__system="kafka",
        metadata__store__factory="kafka",
        systems__kafka__operation__timeout__ms=OPERATION_TIMEOUT_MS,
        systems__kafka__outage__timeout__ms=OPERATION_TIMEOUT_MS,
    )
    store = metadata_store(config)
    writer = checkpoint_writer(config, store)
    reader = checkpoint_manager(config, store)
    try:
        written = CheckpointV1({SystemStreamPartition("kafka", "in", 0): "299"})
        writer.write_checkpoint(TASK, written)
        reader.start()  # a restarted container's reader: it has read nothing yet
        monkeypatch.setattr(kafka_checkpoint, "READ_TIMEOUT_S", READ_TIMEOUT_S)
        with kafka_proxy.proxy.cut(), pytest.raises(ReplicatedLogTimeoutError, match="cannot read its end offset"):
            reader.read_last_checkpoint(TASK)
        assert reader.read_last_checkpoint(TASK) == written, "healed, the same reader finds the checkpoint"
    finally:
        kafka_proxy.proxy.heal()
        reader.stop()
        writer.stop()
        store.close()

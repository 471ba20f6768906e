"""The metadata-store checkpoint manager: per-task V1 records, and fenced writes that a zombie
(an older generation, or an earlier attempt of the same container) can never land."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.checkpoint.base import CheckpointManager, ReadOnlyCheckpointManagerError, WriterFence
from millstream.checkpoint.checkpoint import CheckpointFormatError, CheckpointV1
from millstream.checkpoint.factory import CheckpointManagerFactory, checkpoint_manager
from millstream.checkpoint.metadata_store import (
    CHECKPOINT_V1_NAMESPACE,
    CHECKPOINT_V2_NAMESPACE,
    PREVIOUS_NAMESPACES,
    MetadataStoreCheckpointManager,
)
from millstream.config.settings import Settings
from millstream.contracts.coordination import publish_generation, start_container_attempt
from millstream.contracts.metadata import FencedError, MetadataStore
from millstream.embedded.sqlite import SqliteMetadataStore
from millstream.errors import ConfigError
from millstream.model import SystemStreamPartition, TaskName

TASK = TaskName("Partition 0")
SSP = SystemStreamPartition("log", "in", 0)


def checkpoint(offset: str) -> CheckpointV1:
    return CheckpointV1({SSP: offset})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteMetadataStore]:
    store = SqliteMetadataStore(tmp_path / "metadata.db")
    store.init()
    yield store
    store.close()


@pytest.fixture
def fence(store: SqliteMetadataStore) -> WriterFence:
    publish_generation(store, 1)
    return WriterFence(1, "c0", start_container_attempt(store, "c0"))


def test_no_checkpoint_reads_as_none(store: SqliteMetadataStore) -> None:
    assert MetadataStoreCheckpointManager(store).read_last_checkpoint(TASK) is None


def test_written_checkpoint_reads_back(store: SqliteMetadataStore, fence: WriterFence) -> None:
    manager = MetadataStoreCheckpointManager(store, fence)
    manager.start()
    manager.register(TASK)
    manager.write_checkpoint(TASK, checkpoint("5"))
    manager.write_checkpoint(TASK, checkpoint("9"))
    assert manager.read_last_checkpoint(TASK) == checkpoint("9")
    assert MetadataStoreCheckpointManager(store).read_last_checkpoint(TASK) == checkpoint("9")


def test_checkpoint_is_stored_as_samza_v1_under_the_task_name(store: SqliteMetadataStore, fence: WriterFence) -> None:
    MetadataStoreCheckpointManager(store, fence).write_checkpoint(TASK, checkpoint("42"))
    assert store.get(CHECKPOINT_V1_NAMESPACE, "Partition 0") == checkpoint("42").to_bytes()
    assert CHECKPOINT_V1_NAMESPACE == "checkpoint-v1"


def test_read_all_returns_every_task(store: SqliteMetadataStore, fence: WriterFence) -> None:
    manager = MetadataStoreCheckpointManager(store, fence)
    manager.write_checkpoint(TaskName("Partition 0"), checkpoint("1"))
    manager.write_checkpoint(TaskName("Partition 1"), checkpoint("2"))
    everything = MetadataStoreCheckpointManager(store).read_all()
    assert everything == {TaskName("Partition 0"): checkpoint("1"), TaskName("Partition 1"): checkpoint("2")}
    assert all(isinstance(task, TaskName) for task in everything)


def test_clear_checkpoints_removes_every_task(store: SqliteMetadataStore, fence: WriterFence) -> None:
    manager = MetadataStoreCheckpointManager(store, fence)
    manager.write_checkpoint(TaskName("Partition 0"), checkpoint("1"))
    manager.write_checkpoint(TaskName("Partition 1"), checkpoint("2"))
    MetadataStoreCheckpointManager(store).clear_checkpoints()
    assert manager.read_all() == {}


def test_a_superseded_manager_cannot_clear_checkpoints(store: SqliteMetadataStore, fence: WriterFence) -> None:
    manager = MetadataStoreCheckpointManager(store, fence)
    manager.write_checkpoint(TASK, checkpoint("1"))
    start_container_attempt(store, "c0")
    with pytest.raises(FencedError):
        manager.clear_checkpoints()
    assert manager.read_last_checkpoint(TASK) == checkpoint("1")


def test_manager_without_a_fence_refuses_to_write(store: SqliteMetadataStore) -> None:
    with pytest.raises(ReadOnlyCheckpointManagerError, match="Partition 0"):
        MetadataStoreCheckpointManager(store).write_checkpoint(TASK, checkpoint("1"))
    assert store.all(CHECKPOINT_V1_NAMESPACE) == {}


def test_writer_of_an_older_generation_is_refused(store: SqliteMetadataStore, fence: WriterFence) -> None:
    zombie = MetadataStoreCheckpointManager(store, fence)
    zombie.write_checkpoint(TASK, checkpoint("1"))
    publish_generation(store, 2)
    current = MetadataStoreCheckpointManager(store, WriterFence(2, "c0", start_container_attempt(store, "c0")))
    current.write_checkpoint(TASK, checkpoint("2"))
    with pytest.raises(FencedError) as raised:
        zombie.write_checkpoint(TASK, checkpoint("0"))
    message = str(raised.value)
    assert "Partition 0" in message and "generation 1" in message and "'c0'" in message
    assert current.read_last_checkpoint(TASK) == checkpoint("2")


def test_older_generation_is_refused_even_if_its_container_epoch_is_still_current(
    store: SqliteMetadataStore, fence: WriterFence
) -> None:
    publish_generation(store, 2)
    with pytest.raises(FencedError):
        MetadataStoreCheckpointManager(store, fence).write_checkpoint(TASK, checkpoint("1"))
    assert store.get(CHECKPOINT_V1_NAMESPACE, TASK) is None


def test_older_attempt_of_the_same_container_is_refused(store: SqliteMetadataStore, fence: WriterFence) -> None:
    zombie = MetadataStoreCheckpointManager(store, fence)
    newer = MetadataStoreCheckpointManager(store, WriterFence(1, "c0", start_container_attempt(store, "c0")))
    newer.write_checkpoint(TASK, checkpoint("7"))
    with pytest.raises(FencedError, match="attempt 1"):
        zombie.write_checkpoint(TASK, checkpoint("3"))
    assert newer.read_last_checkpoint(TASK) == checkpoint("7")


def test_newer_generation_and_attempt_are_accepted(store: SqliteMetadataStore, fence: WriterFence) -> None:
    MetadataStoreCheckpointManager(store, fence).write_checkpoint(TASK, checkpoint("1"))
    publish_generation(store, 2)
    newer = MetadataStoreCheckpointManager(store, WriterFence(2, "c0", start_container_attempt(store, "c0")))
    newer.write_checkpoint(TASK, checkpoint("2"))
    assert newer.read_last_checkpoint(TASK) == checkpoint("2")


def test_another_containers_new_attempt_does_not_fence_this_one(store: SqliteMetadataStore, fence: WriterFence) -> None:
    start_container_attempt(store, "c1")
    start_container_attempt(store, "c1")
    MetadataStoreCheckpointManager(store, fence).write_checkpoint(TASK, checkpoint("4"))
    assert MetadataStoreCheckpointManager(store).read_last_checkpoint(TASK) == checkpoint("4")


def test_writer_whose_container_never_started_an_attempt_is_refused(store: SqliteMetadataStore) -> None:
    publish_generation(store, 1)
    with pytest.raises(FencedError, match="'c9'"):
        MetadataStoreCheckpointManager(store, WriterFence(1, "c9", 1)).write_checkpoint(TASK, checkpoint("1"))


def test_corrupt_stored_checkpoint_raises_format_error_naming_the_task(store: SqliteMetadataStore) -> None:
    store.put(CHECKPOINT_V1_NAMESPACE, "Partition 3", b"{not json")
    manager = MetadataStoreCheckpointManager(store)
    with pytest.raises(CheckpointFormatError, match="Partition 3"):
        manager.read_last_checkpoint(TaskName("Partition 3"))
    with pytest.raises(CheckpointFormatError, match="Partition 3"):
        manager.read_all()


def test_with_validation_a_corrupt_checkpoint_fails_and_says_how_to_fall_back(
    store: SqliteMetadataStore, fence: WriterFence
) -> None:
    MetadataStoreCheckpointManager(store, fence).write_checkpoint(TASK, checkpoint("5"))
    store.put(CHECKPOINT_V1_NAMESPACE, TASK, b"{not json")
    with pytest.raises(CheckpointFormatError, match=r"Partition 0.*task\.checkpoint\.validation\.enabled=false"):
        MetadataStoreCheckpointManager(store).read_last_checkpoint(TASK)
    assert store.all(PREVIOUS_NAMESPACES[1]) == {}, "with validation on, nothing is kept beside the checkpoint"


def test_without_validation_a_corrupt_checkpoint_falls_back_to_the_one_it_replaced(
    store: SqliteMetadataStore, fence: WriterFence
) -> None:
    writer = MetadataStoreCheckpointManager(store, fence, validation=False)
    for offset in ("5", "9"):
        writer.write_checkpoint(TASK, checkpoint(offset))
    store.put(CHECKPOINT_V1_NAMESPACE, TASK, b"{not json")
    reader = MetadataStoreCheckpointManager(store, validation=False)
    assert reader.read_last_checkpoint(TASK) == checkpoint("5")
    assert reader.read_all() == {TASK: checkpoint("5")}
    assert reader.skipped == 2


def test_without_validation_a_corrupt_first_checkpoint_reads_as_none(store: SqliteMetadataStore) -> None:
    store.put(CHECKPOINT_V1_NAMESPACE, TASK, b"{not json")
    assert MetadataStoreCheckpointManager(store, validation=False).read_last_checkpoint(TASK) is None


def test_without_validation_a_corrupt_v2_yields_to_the_tasks_v1(store: SqliteMetadataStore, fence: WriterFence) -> None:
    writer = MetadataStoreCheckpointManager(store, fence, validation=False)
    writer.write_checkpoint(TASK, checkpoint("7"))
    store.put(CHECKPOINT_V2_NAMESPACE, TASK, b"{not json")
    reader = MetadataStoreCheckpointManager(store, read_versions=(2, 1), validation=False)
    assert reader.read_last_checkpoint(TASK) == checkpoint("7")


def test_the_factory_passes_task_checkpoint_validation_enabled(store: SqliteMetadataStore) -> None:
    manager = checkpoint_manager(Settings({"task.checkpoint.validation.enabled": "false"}), store)
    assert isinstance(manager, MetadataStoreCheckpointManager) and manager.validation is False


def test_factory_defaults_to_the_metadata_store_manager(store: SqliteMetadataStore, fence: WriterFence) -> None:
    manager = checkpoint_manager(Settings({}), store, fence)
    assert isinstance(manager, MetadataStoreCheckpointManager)
    assert manager.fence == fence
    explicit = checkpoint_manager(Settings({"task.checkpoint.factory": "metadata"}), store, None)
    assert isinstance(explicit, CheckpointManager)


class _ReadOnlyFactory(CheckpointManagerFactory):
    def get_checkpoint_manager(
        self, config: Settings, store: MetadataStore, fence: WriterFence | None = None
    ) -> CheckpointManager:
        return MetadataStoreCheckpointManager(store)


def test_factory_loads_a_module_class_path(store: SqliteMetadataStore, fence: WriterFence) -> None:
    manager = checkpoint_manager(Settings({"task.checkpoint.factory": f"{__name__}:_ReadOnlyFactory"}), store, fence)
    assert isinstance(manager, MetadataStoreCheckpointManager) and manager.fence is None


def test_factory_rejects_an_unknown_name_naming_the_key(store: SqliteMetadataStore) -> None:
    with pytest.raises(ConfigError, match=r"task\.checkpoint\.factory.*metadata"):
        checkpoint_manager(Settings({"task.checkpoint.factory": "nosuch"}), store, None)


def test_factory_rejects_a_class_that_is_not_a_checkpoint_manager_factory(store: SqliteMetadataStore) -> None:
    with pytest.raises(ConfigError, match="not a CheckpointManagerFactory"):
        checkpoint_manager(Settings({"task.checkpoint.factory": "millstream.config.core:Config"}), store, None)


# --- V2 records, read versions, live max age, rollback ---

from millstream.checkpoint.checkpoint import CheckpointId, CheckpointV2  # noqa: E402
from millstream.checkpoint.metadata_store import WRITTEN_AT_NAMESPACE  # noqa: E402


def v2(offset: str, millis: int = 1) -> CheckpointV2:
    return CheckpointV2(CheckpointId(millis, 0), {SSP: offset}, {"backend": {"store": f"marker-{offset}"}})


class ManualClock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def test_v2_is_stored_as_samza_v2_in_its_own_namespace(store: SqliteMetadataStore, fence: WriterFence) -> None:
    MetadataStoreCheckpointManager(store, fence).write_checkpoint(TASK, v2("7"))
    assert store.get(CHECKPOINT_V2_NAMESPACE, "Partition 0") == v2("7").to_bytes()
    assert store.get(CHECKPOINT_V1_NAMESPACE, "Partition 0") is None
    assert store.get(WRITTEN_AT_NAMESPACE, "v2:Partition 0") is not None


def test_read_versions_choose_which_record_is_resumed_from(store: SqliteMetadataStore, fence: WriterFence) -> None:
    writer = MetadataStoreCheckpointManager(store, fence)
    writer.write_checkpoint(TASK, checkpoint("10"))
    writer.write_checkpoint(TASK, v2("5"))
    assert MetadataStoreCheckpointManager(store).read_last_checkpoint(TASK) == checkpoint("10")
    assert MetadataStoreCheckpointManager(store, read_versions=(2,)).read_last_checkpoint(TASK) == v2("5")
    assert MetadataStoreCheckpointManager(store, read_versions=(2, 1)).read_last_checkpoint(TASK) == v2("5")
    assert MetadataStoreCheckpointManager(store, read_versions=(1, 2)).read_last_checkpoint(TASK) == checkpoint("10")


def test_rollback_to_v1_only_ignores_v2_records(store: SqliteMetadataStore, fence: WriterFence) -> None:
    MetadataStoreCheckpointManager(store, fence).write_checkpoint(TASK, v2("5"))
    assert MetadataStoreCheckpointManager(store, read_versions=(1,)).read_last_checkpoint(TASK) is None
    assert MetadataStoreCheckpointManager(store, read_versions=(1,)).read_all() == {}


def test_a_stale_v2_loses_to_a_newer_v1_beyond_the_live_max_age(store: SqliteMetadataStore, fence: WriterFence) -> None:
    clock = ManualClock()
    writer = MetadataStoreCheckpointManager(store, fence, clock_ms=clock)
    writer.write_checkpoint(TASK, v2("5"))
    clock.ms += 600_001
    writer.write_checkpoint(TASK, checkpoint("10"))
    assert MetadataStoreCheckpointManager(store, read_versions=(2, 1)).read_last_checkpoint(TASK) == checkpoint("10")
    lenient = MetadataStoreCheckpointManager(store, read_versions=(2, 1), max_age_ms=10_000_000)
    assert lenient.read_last_checkpoint(TASK) == v2("5")


def test_read_all_applies_the_version_rules_per_task(store: SqliteMetadataStore, fence: WriterFence) -> None:
    writer = MetadataStoreCheckpointManager(store, fence)
    writer.write_checkpoint(TaskName("Partition 0"), checkpoint("1"))
    writer.write_checkpoint(TaskName("Partition 0"), v2("2"))
    writer.write_checkpoint(TaskName("Partition 1"), checkpoint("3"))
    everything = MetadataStoreCheckpointManager(store, read_versions=(2, 1)).read_all()
    assert everything == {TaskName("Partition 0"): v2("2"), TaskName("Partition 1"): checkpoint("3")}


def test_v2_writes_are_fenced_like_v1(store: SqliteMetadataStore, fence: WriterFence) -> None:
    zombie = MetadataStoreCheckpointManager(store, fence)
    start_container_attempt(store, "c0")
    with pytest.raises(FencedError, match="Partition 0"):
        zombie.write_checkpoint(TASK, v2("1"))
    assert store.get(CHECKPOINT_V2_NAMESPACE, TASK) is None


def test_corrupt_v2_record_raises_format_error_naming_the_task_and_version(store: SqliteMetadataStore) -> None:
    store.put(CHECKPOINT_V2_NAMESPACE, "Partition 4", b'{"checkpoint-id": "x"}')
    with pytest.raises(CheckpointFormatError, match=r"version 2.*Partition 4"):
        MetadataStoreCheckpointManager(store, read_versions=(2,)).read_last_checkpoint(TaskName("Partition 4"))


def test_clear_checkpoints_removes_every_version(store: SqliteMetadataStore, fence: WriterFence) -> None:
    writer = MetadataStoreCheckpointManager(store, fence)
    writer.write_checkpoint(TASK, checkpoint("1"))
    writer.write_checkpoint(TASK, v2("1"))
    MetadataStoreCheckpointManager(store).clear_checkpoints()
    assert store.all(CHECKPOINT_V2_NAMESPACE) == {} and store.all(WRITTEN_AT_NAMESPACE) == {}


def test_factory_passes_the_read_versions_and_max_age_from_config(store: SqliteMetadataStore) -> None:
    config = Settings({"task.checkpoint.read.versions": "2,1", "task.live.checkpoint.max.age.ms": "5"})
    manager = checkpoint_manager(config, store, None)
    assert isinstance(manager, MetadataStoreCheckpointManager)
    assert manager.read_versions == (2, 1) and manager.max_age_ms == 5

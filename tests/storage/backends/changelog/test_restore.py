"""Changelog restore on the embedded log: replay to the checkpoint, revert what came after it
(transactional state), reuse of local checkpoint directories, and the rules for the cases where the
checkpoint says little or nothing."""

from __future__ import annotations

import logging
import random
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any

import pytest

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId, CheckpointV1, CheckpointV2
from millstream.config.settings import Settings
from millstream.contracts.metrics import Registry
from millstream.contracts.systems import RecordBatch, WriterToken
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.consumer import LogSystemConsumer
from millstream.embedded.log.factory import LogSystemFactory
from millstream.model import SystemStream, SystemStreamPartition
from millstream.runtime.services import ContainerServices
from millstream.storage.backends.changelog.marker import ChangelogStateCheckpointMarker, parse_v1_entry, v1_entry
from millstream.storage.backends.changelog.restore import ChangelogTaskRestoreManager
from millstream.storage.backends.registry import state_backend_factory_class
from millstream.storage.errors import StateRestoreError
from millstream.storage.layout import checkpoint_dirs, delete_path, read_offset_file, write_offset_file
from millstream.storage.managers.stores import ContainerStorageManager
from millstream.storage.rocksdb import RocksDbKeyValueStorageEngine
from millstream.testing import read_stream
from tests.storage.harness import EVERY_COMMIT, INPUT, TASK, Opened, StateHarness, state_config

CHANGELOG = SystemStreamPartition("log", "counts-changelog", 0)
MARKER_KEY = state_backend_factory_class("changelog", "test").marker_key()


def harness(tmp_path: Path, **extra: Any) -> StateHarness:
    return StateHarness(state_config(tmp_path, "changelog", **extra))


def contents(opened: Opened) -> dict[str, int]:
    return dict(opened.store.all())


def changelog_records(h: StateHarness) -> list[tuple[str, int | None]]:
    """Decoded with the log system's serdes of these tests (string keys, JSON values), as the store's."""
    return read_stream(h.config, SystemStream("log", "counts-changelog"))[0]


def plans(opened: Opened, checkpoint: Checkpoint | None) -> list:
    manager = ChangelogTaskRestoreManager(opened.storage.backend_context(["counts"]), MARKER_KEY)
    manager.init(checkpoint)
    return manager.plans


def local_checkpoint_dirs(h: StateHarness) -> list[Path]:
    """The store's checkpoint directories of the harness's last commit."""
    assert h.checkpoint is not None
    return [d for d in Path(h.config["job.data.dir"]).rglob(f"*-{h.checkpoint.checkpoint_id}") if d.is_dir()]


def crash(opened: Opened) -> None:
    """Writes reached the changelog (written back from the object cache, the producer flushed), then the
    process died."""
    opened.storage.write_back()
    opened.producers.flush("Partition 0")
    opened.storage.close()
    opened.container.close()


def test_every_write_goes_to_the_task_changelog_partition_without_an_object_cache(tmp_path: Path) -> None:
    h = harness(tmp_path, stores__counts__object__cache__size="0")
    opened = h.open()
    opened.store.put("a", 1)
    opened.store.put("b", 2)
    opened.store.delete("a")
    opened.close()
    assert changelog_records(h) == [("a", 1), ("b", 2), ("a", None)]


@pytest.mark.parametrize("writer", [WriterToken("test-1", "0", 1, 2), None], ids=["claimed", "unclaimed"])
def test_a_restore_takes_its_changelog_offsets_from_the_producer_that_claimed_it_else_from_the_admin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: WriterToken | None
) -> None:
    h = harness(tmp_path)
    opened = h.open(writer=writer)
    opened.store.put_all({"a": 1, "b": 1})
    h.commit(opened)
    opened.store.put("a", 2)
    crash(opened)
    asked: list[SystemStreamPartition] = []
    admin_metadata = LogSystemAdmin.get_ssp_metadata

    def counted(admin: LogSystemAdmin, ssps: Iterable[SystemStreamPartition]) -> Any:
        ssps = list(ssps)
        asked.extend(ssps)
        return admin_metadata(admin, ssps)

    monkeypatch.setattr(LogSystemAdmin, "get_ssp_metadata", counted)
    restored = h.open(writer=None if writer is None else WriterToken("test-1", "0", 1, 3))
    assert contents(restored) == {"a": 1, "b": 1}
    restored.close()
    assert asked.count(CHANGELOG) == (0 if writer else 1), "the claim's file answers; without a claim the admin"


def test_restore_replays_to_the_checkpoint_and_reverts_later_records(tmp_path: Path) -> None:
    h = harness(tmp_path)
    opened = h.open()
    opened.store.put_all({"a": 1, "b": 1})
    h.commit(opened)
    opened.store.put("a", 2)
    opened.store.put("c", 1)
    opened.store.delete("b")
    crash(opened)

    restored = h.open()
    assert contents(restored) == {"a": 1, "b": 1}
    tail = changelog_records(h)[5:]
    assert sorted(tail, key=str) == sorted([("a", 1), ("b", 1), ("c", None)], key=str)
    restored.close()

    again = h.open()  # reverting is idempotent: a second restore sees the same state
    assert contents(again) == {"a": 1, "b": 1}
    again.close()


def test_a_restart_with_the_local_checkpoint_dir_replays_nothing_before_it(tmp_path: Path) -> None:
    h = harness(tmp_path)
    opened = h.open()
    opened.store.put_all({f"k{i}": i for i in range(100)})
    checkpoint = h.commit(opened)
    opened.store.put("late", 1)
    crash(opened)
    assert checkpoint is not None
    probe = h.open()
    (plan,) = plans(probe, checkpoint)
    assert plan.retained_dir is not None and plan.retained_dir.name.endswith(str(checkpoint.checkpoint_id))
    assert plan.start is None  # the directory is exactly the checkpoint: nothing to replay
    assert plan.revert_from is not None
    assert contents(probe) == {f"k{i}": i for i in range(100)}
    probe.close()


def test_a_local_checkpoint_dir_older_than_the_changelogs_delete_retention_is_not_reused(tmp_path: Path) -> None:
    """A key deleted after the directory was made could have lost its tombstone to compaction by then: replaying
    the tail onto the directory would bring it back, so the whole changelog is replayed instead."""
    h = harness(tmp_path, stores__counts__changelog__delete__retention__ms="0")
    opened = h.open()
    opened.store.put_all({"a": 1, "b": 1})
    checkpoint = h.commit(opened)
    crash(opened)
    restored = h.open()
    (plan,) = plans(restored, checkpoint)
    assert plan.retained_dir is None and plan.start == "0"
    assert contents(restored) == {"a": 1, "b": 1}
    restored.close()


def test_clean_on_container_start_ignores_local_checkpoint_dirs(tmp_path: Path) -> None:
    h = harness(tmp_path, stores__counts__clean__on__container__start="true")
    opened = h.open()
    opened.store.put("a", 1)
    checkpoint = h.commit(opened)
    crash(opened)
    restored = h.open()
    (plan,) = plans(restored, checkpoint)
    assert plan.retained_dir is None and plan.start == "0"
    assert contents(restored) == {"a": 1}
    restored.close()


def test_without_any_checkpoint_the_whole_changelog_is_reverted(tmp_path: Path) -> None:
    h = harness(tmp_path)
    opened = h.open()
    opened.store.put_all({"a": 1, "b": 2})
    crash(opened)
    restored = h.open(None)
    assert contents(restored) == {}
    assert sorted(changelog_records(h)[2:]) == [("a", None), ("b", None)]
    restored.close()


def test_a_checkpoint_recording_an_empty_changelog_reverts_everything(tmp_path: Path) -> None:
    h = harness(tmp_path)
    opened = h.open()
    h.commit(opened)  # before any write: the marker records no offset
    assert isinstance(h.checkpoint, CheckpointV2)
    (text,) = h.checkpoint.state_checkpoint_markers[MARKER_KEY].values()
    assert ChangelogStateCheckpointMarker.parse(text).changelog_offset is None
    opened.store.put("a", 1)
    crash(opened)
    restored = h.open()
    assert contents(restored) == {}
    restored.close()


@pytest.mark.parametrize(("retain", "expected"), [("true", {"a": 1}), ("false", {})])
def test_a_checkpoint_that_does_not_know_the_store_retains_or_reverts_per_config(
    tmp_path: Path, retain: str, expected: dict[str, int]
) -> None:
    h = harness(tmp_path, task__transactional__state__retain__existing__state=retain)
    opened = h.open()
    opened.store.put("a", 1)
    crash(opened)
    stateless_checkpoint = CheckpointV2(CheckpointId.create(), {INPUT: "5"}, {})
    restored = h.open(stateless_checkpoint)
    assert contents(restored) == expected
    restored.close()


def test_a_v1_checkpoint_restores_the_same_state_as_v2(tmp_path: Path) -> None:
    h = harness(tmp_path)
    opened = h.open()
    opened.store.put_all({"a": 1, "b": 2})
    h.commit(opened)
    opened.store.put("a", 99)
    crash(opened)
    v1 = h.v1
    checkpoint_id, offset = parse_v1_entry(v1.offsets[CHANGELOG])
    assert h.checkpoint is not None
    assert checkpoint_id == h.checkpoint.checkpoint_id and offset == "1"
    restored = h.open(v1)
    assert contents(restored) == {"a": 1, "b": 2}
    restored.close()


def test_a_checkpointed_offset_beyond_the_changelog_restores_all_of_it(tmp_path: Path, caplog) -> None:
    h = harness(tmp_path)
    opened = h.open()
    opened.store.put_all({"a": 1})
    crash(opened)
    beyond = CheckpointV1({INPUT: "1", CHANGELOG: v1_entry(CheckpointId.create(), "500")})
    with caplog.at_level(logging.WARNING):
        restored = h.open(beyond)
    assert contents(restored) == {"a": 1}
    assert "outside" in caplog.text
    restored.close()


def test_a_checkpoint_older_than_the_compaction_lag_restores_to_the_newest_record(tmp_path: Path) -> None:
    h = harness(tmp_path, stores__counts__changelog__min__compaction__lag__ms="1000")
    opened = h.open()
    opened.store.put("a", 1)
    opened.producers.flush("Partition 0")
    old = CheckpointV1({INPUT: "1", CHANGELOG: v1_entry(CheckpointId(1_000, 0), "0")})
    opened.store.put("a", 2)
    crash(opened)
    restored = h.open(old)
    assert contents(restored) == {"a": 2}
    restored.close()


def test_non_transactional_restore_replays_everything(tmp_path: Path) -> None:
    h = harness(tmp_path, task__transactional__state__restore__enabled="false")
    opened = h.open()
    opened.store.put("a", 1)
    h.commit(opened)
    opened.store.put("a", 2)
    crash(opened)
    restored = h.open()
    assert contents(restored) == {"a": 2}
    restored.close()


def test_an_in_memory_store_is_rebuilt_from_its_changelog(tmp_path: Path) -> None:
    h = harness(tmp_path, stores__counts__factory="inmemory")
    opened = h.open()
    opened.store.put_all({"a": 1, "b": 2})
    h.commit(opened)
    opened.store.put("b", 3)
    crash(opened)
    restored = h.open()
    assert contents(restored) == {"a": 1, "b": 2}
    restored.close()


def test_older_checkpoint_dirs_are_deleted_after_a_commit(tmp_path: Path) -> None:
    h = harness(tmp_path, **EVERY_COMMIT)
    opened = h.open()
    store_dir = opened.storage.backend_context(["counts"]).stores["counts"].store_dir
    for value in range(3):
        opened.store.put("a", value)
        checkpoint = h.commit(opened)
    assert checkpoint is not None
    assert list(checkpoint_dirs(store_dir)) == [checkpoint.checkpoint_id]
    opened.close()


def test_a_restart_from_a_v1_checkpoint_reuses_the_local_checkpoint_dir(tmp_path: Path) -> None:
    """With ``task.checkpoint.write.versions=1`` the directory records the changelog offset in
    ``OFFSET-v2`` as Samza does (the offset, not the V1 entry), so a restart reuses it."""
    h = harness(tmp_path)
    opened = h.open()
    opened.store.put_all({f"k{i}": i for i in range(100)})
    h.commit(opened, write_versions=(1,))
    opened.store.put("late", 1)
    crash(opened)
    (directory,) = local_checkpoint_dirs(h)
    assert read_offset_file(directory) == {CHANGELOG: "99"}
    probe = h.open(h.v1)
    (plan,) = plans(probe, h.v1)
    assert plan.retained_dir == directory and plan.start is None
    assert contents(probe) == {f"k{i}": i for i in range(100)}
    probe.close()


def test_a_local_checkpoint_dir_of_an_empty_changelog_has_no_offset_file(tmp_path: Path) -> None:
    h = harness(tmp_path)
    opened = h.open()
    h.commit(opened, write_versions=(1,), stop_after="checkpoint")
    directories = local_checkpoint_dirs(h)
    assert directories and all(not (d / "OFFSET-v2").exists() for d in directories)
    opened.close()


def test_an_offset_file_holding_a_v1_entry_is_still_read_as_its_offset(tmp_path: Path) -> None:
    h = harness(tmp_path)
    opened = h.open()
    opened.store.put_all({"a": 1, "b": 2})
    h.commit(opened, write_versions=(1,))
    crash(opened)
    (directory,) = local_checkpoint_dirs(h)
    assert h.checkpoint is not None
    write_offset_file(directory, {CHANGELOG: v1_entry(h.checkpoint.checkpoint_id, "1")})
    probe = h.open(h.v1)
    (plan,) = plans(probe, h.v1)
    assert plan.retained_dir == directory and plan.start is None
    probe.close()


class PollingOnlyLogConsumer(LogSystemConsumer):
    """A log consumer without the bulk-read capability, as Kafka's and Kinesis's are."""

    read_range = None  # type: ignore[assignment]


class StoppingEarlyLogConsumer(LogSystemConsumer):
    """A bulk read that stops after its first batch, as the log's does at a transaction still open."""

    def read_range(self, ssp: SystemStreamPartition, start: str, end: str) -> Generator[RecordBatch, None, None]:
        batches = super().read_range(ssp, start, end)
        yield next(batches)
        batches.close()


class PollingOnlyLogFactory(LogSystemFactory):
    def get_consumer(self, system_name: str, config: Settings) -> LogSystemConsumer:
        consumer = super().get_consumer(system_name, config)
        return PollingOnlyLogConsumer(system_name, consumer.layout, batch_size=consumer.batch_size)


class StoppingEarlyLogFactory(LogSystemFactory):
    def get_consumer(self, system_name: str, config: Settings) -> LogSystemConsumer:
        consumer = super().get_consumer(system_name, config)
        return StoppingEarlyLogConsumer(system_name, consumer.layout, batch_size=consumer.batch_size)


@pytest.mark.parametrize(
    ("factory", "bulk"),
    [("log", 45), (f"{__name__}:StoppingEarlyLogFactory", 4), (f"{__name__}:PollingOnlyLogFactory", 0)],
)
def test_a_replay_in_bulk_by_polling_or_both_restores_the_same_state_exactly(
    tmp_path: Path, factory: str, bulk: int
) -> None:
    """The embedded log hands the replay its records in bulk; a system without that capability is polled an
    envelope at a time, and where a bulk read stops early the rest is polled: the same state every way, the
    records after the checkpoint reverted, and the gauge says how many records came in bulk."""
    h = harness(tmp_path, stores__counts__object__cache__size="0", systems__log__poll__batch__size="4")
    opened = h.open()
    opened.store.put_all({f"k{i}": i for i in range(40)})
    opened.store.delete_all([f"k{i}" for i in range(0, 40, 10)])  # tombstones
    opened.store.put("k0", -1)
    h.commit(opened)
    opened.store.put_all({"k1": 100, "late": 1})
    crash(opened)

    # a new host: no local checkpoint directory to start from, the whole changelog is replayed
    h.config = h.config.with_overrides(
        {"systems.log.samza.factory": factory, "stores.counts.clean.on.container.start": "true"}
    )
    registry = Registry()
    restored = h.open(metrics=registry)
    wanted = {f"k{i}": i for i in range(40) if i % 10} | {"k0": -1}
    assert contents(restored) == wanted
    values = {sample.name: sample.value for sample in registry.snapshot()}
    assert values["store_restored_records"] == 45
    assert values["store_restored_bulk_records"] == bulk
    restored.close()


def memtable_factory(store: Path) -> str:
    """The memtable a RocksDB store was last opened with, from its newest OPTIONS file."""
    newest = max(store.glob("OPTIONS-*"), key=lambda path: int(path.name.split("-")[1]))
    (line,) = [line.strip() for line in newest.read_text().splitlines() if line.strip().startswith("memtable_factory=")]
    return line.removeprefix("memtable_factory=")


def restore_gauges(registry: Registry) -> dict[str, float]:
    return {sample.name: sample.value for sample in registry.snapshot() if sample.name.startswith("store_restored")}


def write_shuffled(opened: Opened, keys: int, rounds: int, seed: int) -> dict[str, int]:
    """``rounds`` writes of each of ``keys`` keys in a shuffled order, every seventh a delete; what the store
    then holds."""
    order = [i % keys for i in range(keys * rounds)]
    random.Random(seed).shuffle(order)
    held: dict[str, int] = {}
    for n, i in enumerate(order):
        name = f"k{i:05d}"
        if n % 7 == 0:
            opened.store.delete(name)
            held.pop(name, None)
        else:
            opened.store.put(name, n)
            held[name] = n
    return held


def test_a_store_that_starts_empty_is_replayed_through_a_vector_memtable_to_exactly_the_checkpoint(
    tmp_path: Path,
) -> None:
    """Keys in random order with repeats and tombstones, a checkpoint in the middle of the changelog and records
    after it: a new host's replay takes the vector memtable (the gauge says so), holds exactly the checkpoint's
    state after the revert, is open with the store's normal options, and reads and writes normally."""
    h = harness(
        tmp_path,
        stores__counts__object__cache__size="0",
        systems__log__poll__batch__size="500",  # many batches
        stores__counts__container__write__buffer__size__bytes=str(64 * 1024),  # several memtables, flushed
    )
    opened = h.open()
    wanted = write_shuffled(opened, 3000, 3, seed=1)
    h.commit(opened)
    write_shuffled(opened, 3500, 1, seed=2)  # after the checkpoint: reverted
    crash(opened)

    h.config = h.config.with_overrides({"stores.counts.clean.on.container.start": "true"})
    registry = Registry()
    restored = h.open(metrics=registry)
    assert contents(restored) == wanted
    gauges = restore_gauges(registry)
    assert gauges["store_restored_records"] == 9000
    assert 0 < gauges["store_restored_vector_memtable_records"] <= 9000
    engine = restored.storage.engines["counts"]
    assert isinstance(engine, RocksDbKeyValueStorageEngine) and not engine.vector_memtable
    assert memtable_factory(engine.path) == "SkipListFactory"
    restored.store.put("new", 1)
    restored.store.delete("k00001")
    h.commit(restored)
    restored.close()

    h.config = h.config.with_overrides({"stores.counts.clean.on.container.start": "false"})
    again = h.open()  # from the local checkpoint directory the restored store made
    assert contents(again) == {k: v for k, v in wanted.items() if k != "k00001"} | {"new": 1}
    again.close()


def test_a_store_restored_from_a_local_checkpoint_replays_its_tail_through_the_normal_memtable(
    tmp_path: Path,
) -> None:
    """A store that starts from local state (an older checkpoint directory, the newer one lost) replays only the
    tail through write batches: no vector memtable, and the same exact state."""
    h = harness(tmp_path, stores__counts__object__cache__size="0")
    opened = h.open()
    write_shuffled(opened, 300, 1, seed=3)
    h.commit(opened)
    wanted = write_shuffled(opened, 400, 2, seed=4)
    h.commit(opened, stop_after="checkpoint")  # the older directory is still there
    for directory in local_checkpoint_dirs(h):
        delete_path(directory)
    crash(opened)

    registry = Registry()
    restored = h.open(metrics=registry)
    assert contents(restored) == wanted
    gauges = restore_gauges(registry)
    assert gauges["store_restored_records"] == 800  # the tail only
    assert gauges["store_restored_vector_memtable_records"] == 0
    restored.close()


class FailingMidReplayLogConsumer(LogSystemConsumer):
    """A bulk read that fails after its third batch, as a process dying in the middle of a replay would."""

    def read_range(self, ssp: SystemStreamPartition, start: str, end: str) -> Generator[RecordBatch, None, None]:
        for number, batch in enumerate(super().read_range(ssp, start, end)):
            if number == 3:
                raise OSError("the changelog's disk went away")
            yield batch


class FailingMidReplayLogFactory(LogSystemFactory):
    def get_consumer(self, system_name: str, config: Settings) -> LogSystemConsumer:
        consumer = super().get_consumer(system_name, config)
        return FailingMidReplayLogConsumer(system_name, consumer.layout, batch_size=consumer.batch_size)


def test_a_replay_that_fails_midway_leaves_a_store_the_next_restore_replays_whole(tmp_path: Path) -> None:
    """The failed attempt loaded part of the store through a vector memtable; the next one must not trust it,
    and restores exactly the checkpoint's state."""
    h = harness(tmp_path, stores__counts__object__cache__size="0", systems__log__poll__batch__size="100")
    opened = h.open()
    wanted = write_shuffled(opened, 500, 2, seed=5)
    h.commit(opened)
    write_shuffled(opened, 100, 1, seed=6)
    crash(opened)

    new_host = {"stores.counts.clean.on.container.start": "false", "job.logged.store.base.dir": str(tmp_path / "b")}
    failing = StateHarness(h.config.with_overrides({**new_host, "systems.log.samza.factory": FAILING}))
    services = ContainerServices(failing.config)
    container = ContainerStorageManager(failing.config, failing.model, "0", failing.metadata, services)
    storage = container.task_storage(TASK, failing.model.tasks[TASK])
    assert storage is not None
    try:
        with pytest.raises(StateRestoreError, match="disk went away"):
            container.restore({TASK: (storage, h.checkpoint)})
    finally:  # the process that failed lets go of the store (a real one exits)
        storage.close()
        container.close()
        services.close()
    store_dir = next(path for path in (tmp_path / "b").rglob("*") if path.is_dir() and any(path.glob("OPTIONS-*")))
    assert memtable_factory(store_dir) == "SkipListFactory"  # the failed load reopened it on its normal options

    registry = Registry()
    restored = StateHarness(h.config.with_overrides(new_host)).open(h.checkpoint, metrics=registry)
    assert contents(restored) == wanted
    assert restore_gauges(registry)["store_restored_vector_memtable_records"] > 0
    restored.close()


FAILING = f"{__name__}:FailingMidReplayLogFactory"

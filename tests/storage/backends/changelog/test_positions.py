"""A changelog snapshot records only a position the system positively gave, and a restore refuses a
checkpoint marker the changelog contradicts (issue: a null marker written after a timed-out offset
lookup restored an empty store while the input offsets moved on)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millstream.checkpoint.checkpoint import CheckpointId, CheckpointV2
from millstream.contracts.systems import SystemProducer, SystemStreamPartitionMetadata
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.log.producer import LogSystemProducer
from millstream.model import SystemStreamPartition
from millstream.storage.backends.changelog.marker import ChangelogStateCheckpointMarker
from millstream.storage.errors import StateBackupError, StateRestoreError
from tests.storage.backends.changelog.test_restore import CHANGELOG, MARKER_KEY, contents, crash, harness
from tests.storage.harness import INPUT, TASK, Opened, StateHarness


def flushed(opened: Opened) -> None:
    opened.storage.write_back()
    opened.producers.flush(TASK)


@pytest.fixture
def admin_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The log producer reports no acknowledged position, as Kafka's does not: a snapshot of a written store asks
    the admin where the changelog ends, as every snapshot did before producers reported their appends."""
    monkeypatch.setattr(LogSystemProducer, "written_offsets", SystemProducer.written_offsets)


@pytest.fixture
def unreadable_index(tmp_path: Path) -> Iterator[Any]:
    """Makes the changelog partition's index unreadable (garbage where SQLite expects its header) and gives
    the original back when called again."""
    saved = tmp_path / "saved-index"

    def damage(h: StateHarness, *, repair: bool = False) -> None:
        layout = LogSystemFactory().get_admin("log", h.config).layout
        index = layout.partition_path(CHANGELOG.stream, CHANGELOG.partition)
        if repair:
            shutil.copyfile(saved, index)
            return
        shutil.copyfile(index, saved)
        index.write_bytes(b"not an index " * 512)

    yield damage


def test_a_snapshot_fails_naming_task_store_and_partition_when_the_changelog_index_is_unreadable(
    tmp_path: Path, unreadable_index: Any, admin_only: None
) -> None:
    h = harness(tmp_path)
    opened = h.open()
    opened.store.put_all({"a": 1, "b": 2, "c": 3})
    h.commit(opened)
    opened.store.put_all({"d": 4, "e": 5})
    flushed(opened)
    unreadable_index(h)
    with pytest.raises(StateBackupError) as raised:
        opened.storage.snapshot(CheckpointId.create())
    assert "task 'Partition 0'" in str(raised.value) and "'counts'" in str(raised.value)
    assert "counts-changelog" in str(raised.value)
    unreadable_index(h, repair=True)
    crash(opened)
    restored = h.open()  # from the last checkpoint that was written: the failed snapshot left none
    assert contents(restored) == {"a": 1, "b": 2, "c": 3}
    restored.close()


def test_a_snapshot_after_the_index_is_readable_again_covers_every_write(
    tmp_path: Path, unreadable_index: Any, admin_only: None
) -> None:
    h = harness(tmp_path)
    opened = h.open()
    opened.store.put_all({"a": 1})
    h.commit(opened)
    opened.store.put_all({"b": 2})
    flushed(opened)
    unreadable_index(h)
    with pytest.raises(StateBackupError):
        opened.storage.snapshot(CheckpointId.create())
    unreadable_index(h, repair=True)
    h.commit(opened)  # the store stayed dirty: the next commit snapshots it
    crash(opened)
    restored = h.open()
    assert contents(restored) == {"a": 1, "b": 2}
    restored.close()


def answering(monkeypatch: pytest.MonkeyPatch, newest: str | None) -> None:
    """The log admin answers ``newest`` for the changelog partition, as a system that lost its answer might."""
    upcoming = "0" if newest is None else str(int(newest) + 1)
    oldest = None if newest is None else "0"

    def written(self: LogSystemAdmin, ssps: Any) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        return {ssp: SystemStreamPartitionMetadata(oldest, newest, upcoming) for ssp in ssps}

    monkeypatch.setattr(LogSystemAdmin, "get_written_ssp_metadata", written)


def test_a_snapshot_refuses_an_empty_changelog_after_the_task_wrote_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, admin_only: None
) -> None:
    h = harness(tmp_path)
    opened = h.open()
    opened.store.put("a", 1)
    flushed(opened)
    answering(monkeypatch, None)
    with pytest.raises(StateBackupError, match="reports no records although the task wrote to it"):
        opened.storage.snapshot(CheckpointId.create())


def test_a_snapshot_refuses_a_newest_offset_before_the_last_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, admin_only: None
) -> None:
    h = harness(tmp_path)
    opened = h.open()
    opened.store.put_all({"a": 1, "b": 2, "c": 3})
    h.commit(opened)
    opened.store.put("d", 4)
    flushed(opened)
    answering(monkeypatch, "1")
    with pytest.raises(StateBackupError, match="newest offset 1, before offset 2"):
        opened.storage.snapshot(CheckpointId.create())


def unanswering(monkeypatch: pytest.MonkeyPatch) -> None:
    """The log admin fails every question about where a changelog ends."""

    def written(self: LogSystemAdmin, ssps: Any) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        raise AssertionError("the admin was asked where the changelog ends")

    monkeypatch.setattr(LogSystemAdmin, "get_written_ssp_metadata", written)


def marker_offset(checkpoint: CheckpointV2 | None) -> str | None:
    assert checkpoint is not None
    (text,) = checkpoint.state_checkpoint_markers[MARKER_KEY].values()
    return ChangelogStateCheckpointMarker.parse(text).changelog_offset


def test_a_snapshot_takes_the_changelog_end_from_the_producers_appends_without_asking_the_admin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = harness(tmp_path)
    opened = h.open()
    opened.store.put_all({"a": 1, "b": 2, "c": 3})
    assert marker_offset(h.commit(opened)) == "2"
    unanswering(monkeypatch)
    opened.store.put_all({"d": 4})
    assert marker_offset(h.commit(opened)) == "3"
    crash(opened)
    monkeypatch.undo()
    restored = h.open()
    assert contents(restored) == {"a": 1, "b": 2, "c": 3, "d": 4}
    restored.close()


def test_a_store_unwritten_since_the_last_snapshot_keeps_its_offset_without_asking_the_admin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, admin_only: None
) -> None:
    h = harness(tmp_path)
    opened = h.open()
    opened.store.put_all({"a": 1, "b": 2})
    assert marker_offset(h.commit(opened)) == "1"
    unanswering(monkeypatch)
    (marker,) = opened.storage.snapshot(CheckpointId.create())[MARKER_KEY].values()
    assert ChangelogStateCheckpointMarker.parse(marker).changelog_offset == "1"
    opened.close()


def test_the_first_snapshot_after_a_restore_asks_the_admin_and_fails_when_it_cannot_answer(
    tmp_path: Path, unreadable_index: Any
) -> None:
    h = harness(tmp_path)
    opened = h.open()
    opened.store.put_all({"a": 1, "b": 2})
    h.commit(opened)
    crash(opened)
    restored = h.open()  # its producer appended nothing yet: only the admin knows where the changelog ends
    unreadable_index(h)
    with pytest.raises(StateBackupError, match="cannot read the newest offset of changelog partition"):
        restored.storage.snapshot(CheckpointId.create())
    unreadable_index(h, repair=True)
    restored.close()


def test_an_idle_task_with_an_empty_changelog_still_snapshots_it_as_empty(tmp_path: Path) -> None:
    h = harness(tmp_path)
    opened = h.open()
    checkpoint = h.commit(opened)
    assert checkpoint is not None
    (text,) = checkpoint.state_checkpoint_markers[MARKER_KEY].values()
    assert ChangelogStateCheckpointMarker.parse(text).changelog_offset is None
    opened.close()


def marker_checkpoint(offset: str | None) -> CheckpointV2:
    marker = ChangelogStateCheckpointMarker(CHANGELOG, offset).to_string()
    return CheckpointV2(CheckpointId.create(), {INPUT: "7"}, {MARKER_KEY: {"counts": marker}})


@pytest.mark.parametrize(("policy", "expected"), [("reset", {}), ("replay", {"a": 1, "b": 2})])
def test_a_restore_refuses_an_empty_marker_for_records_written_before_the_checkpoint(
    tmp_path: Path, policy: str, expected: dict[str, int]
) -> None:
    h = harness(tmp_path)
    opened = h.open()
    opened.store.put_all({"a": 1, "b": 2})
    crash(opened)
    lying = marker_checkpoint(None)  # taken after those records were flushed, yet it says "empty"
    with pytest.raises(StateRestoreError, match="holds records written before the checkpoint") as raised:
        h.open(lying)
    assert "stores.counts.changelog.checkpoint.mismatch" in str(raised.value)
    recovering = StateHarness(h.config.with_overrides({"stores.counts.changelog.checkpoint.mismatch": policy}))
    restored = recovering.open(lying)
    assert contents(restored) == expected
    restored.close()


def test_a_restore_refuses_a_marker_naming_an_offset_of_an_empty_changelog(tmp_path: Path) -> None:
    h = harness(tmp_path)
    with pytest.raises(StateRestoreError, match=r"names changelog offset 299, but partition .* is empty"):
        h.open(marker_checkpoint("299"))
    recovering = StateHarness(h.config.with_overrides({"stores.counts.changelog.checkpoint.mismatch": "reset"}))
    restored = recovering.open(marker_checkpoint("299"))
    assert contents(restored) == {}
    restored.close()

"""A commit's cleanup deletes the task's older checkpoint directories without listing the store's directory,
which holds every task's directories: listing it at each commit made a round of commits of ``n`` tasks cost
``n²`` (issue 40)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from millstream.checkpoint.checkpoint import CheckpointId
from millstream.storage.errors import StateBackupError
from millstream.storage.layout import checkpoint_dir, checkpoint_dirs
from tests.storage.harness import EVERY_COMMIT, StateHarness, state_config


def test_only_a_stores_first_cleanup_lists_the_shared_directory_and_every_older_snapshot_still_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = StateHarness(state_config(tmp_path, "changelog", **EVERY_COMMIT))
    opened = harness.open()
    store_dir = opened.storage._stores["counts"].spec.store_dir
    other_task = checkpoint_dir(store_dir.with_name("Partition_1"), CheckpointId.create())
    other_task.mkdir(parents=True)  # another task's snapshot beside ours: never ours to delete
    leftover = checkpoint_dir(store_dir, CheckpointId.create())
    leftover.mkdir()  # an earlier attempt's snapshot: the first cleanup finds it by listing
    listed: list[str] = []
    listdir = os.listdir

    def counting(path: str | os.PathLike[str] = ".") -> list[str]:
        if Path(path) == store_dir.parent:
            listed.append(str(path))
        return listdir(path)

    monkeypatch.setattr(os, "listdir", counting)
    opened.store.put("k", 1)
    first = harness.commit(opened)
    assert first is not None and len(listed) == 1
    assert list(checkpoint_dirs(store_dir)) == [first.checkpoint_id]
    listed.clear()
    for value in range(2, 6):
        opened.store.put("k", value)
        latest = harness.commit(opened)
    assert listed == [], "a later commit listed the directory every task's stores share"
    assert latest is not None
    assert list(checkpoint_dirs(store_dir)) == [latest.checkpoint_id]
    assert other_task.is_dir()
    opened.close()


def test_a_snapshot_that_failed_half_way_is_deleted_by_the_next_cleanup_without_a_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = StateHarness(state_config(tmp_path, "changelog", **EVERY_COMMIT))
    opened = harness.open()
    store_dir = opened.storage._stores["counts"].spec.store_dir
    opened.store.put("k", 1)
    harness.commit(opened)
    engine = opened.storage.engines["counts"]
    checkpoint = engine.checkpoint
    half_made: list[Path] = []

    def crashed_half_way(directory: Path) -> None:  # as a process killed inside RocksDB's checkpoint would leave it
        half = directory.with_name(directory.name + ".tmp")
        half.mkdir()
        half_made.append(half)
        raise OSError("killed")

    monkeypatch.setattr(engine, "checkpoint", crashed_half_way)
    opened.store.put("k", 2)
    with pytest.raises(StateBackupError):
        harness.commit(opened)
    monkeypatch.setattr(engine, "checkpoint", checkpoint)
    monkeypatch.setattr(os, "listdir", lambda path=".": pytest.fail(f"a later commit listed '{path}'"))
    latest = harness.commit(opened)
    monkeypatch.undo()
    assert latest is not None and half_made and not half_made[0].exists()
    assert list(checkpoint_dirs(store_dir)) == [latest.checkpoint_id]
    opened.close()

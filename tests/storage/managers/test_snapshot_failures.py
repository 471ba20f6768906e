"""A snapshot that the filesystem refuses (a full disk, a directory that went away) fails the commit
naming the task, the store and the directory, leaves no half snapshot behind for a later start to
mistake for one, and leaves the last good checkpoint restorable."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from millstream.storage.errors import StateBackupError
from millstream.storage.layout import checkpoint_dirs
from tests.storage.harness import EVERY_COMMIT, StateHarness, state_config


def test_a_full_disk_during_a_snapshot_fails_naming_store_and_directory_and_the_last_checkpoint_restores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = StateHarness(state_config(tmp_path, "changelog", **EVERY_COMMIT))
    opened = harness.open()
    opened.store.put("k", 1)
    good = harness.commit(opened)
    assert good is not None
    opened.store.put("k", 2)
    engine = opened.storage.engines["counts"]

    def full_disk(directory: Path) -> None:
        directory.mkdir()  # RocksDB got as far as some files
        (directory / "000009.sst").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device", str(directory / "000009.sst"))

    monkeypatch.setattr(engine, "checkpoint", full_disk)
    store_dir = opened.storage._stores["counts"].spec.store_dir
    with pytest.raises(StateBackupError) as failed:
        harness.commit(opened)
    message = str(failed.value)
    assert "task 'Partition 0'" in message and "store 'counts'" in message
    assert f"into '{store_dir.parent}/" in message and "No space left on device" in message
    assert list(checkpoint_dirs(store_dir)) == [good.checkpoint_id]  # the half snapshot is gone
    opened.close()

    harness.checkpoint = good  # what the durable checkpoint names: a restart restores it
    reopened = harness.open()
    assert reopened.store.get("k") == 1
    reopened.close()


def test_a_checkpoint_file_the_filesystem_refuses_fails_the_commit_naming_store_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory can go between the snapshot and the files that record what it holds (a cleanup script,
    a failing disk): the commit fails naming the store, not with a bare ``OSError``."""
    harness = StateHarness(state_config(tmp_path, "changelog"))
    opened = harness.open()
    opened.store.put("k", 1)
    store_dir = opened.storage._stores["counts"].spec.store_dir

    def gone(directory: Path, document: object) -> None:
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(directory))

    monkeypatch.setattr("millstream.storage.managers.stores.write_checkpoint_file", gone)
    with pytest.raises(StateBackupError) as failed:
        harness.commit(opened)
    message = str(failed.value)
    assert "task 'Partition 0'" in message and "store 'counts'" in message
    assert f"in '{store_dir.parent}/" in message and "Not a directory" in message
    opened.close()

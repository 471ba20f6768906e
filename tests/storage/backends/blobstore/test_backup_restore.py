"""The blob-store backend on the local blob store: incremental uploads, deletes only after the
checkpoint that no longer needs a file, orphan collection and cleanup after crashes, local reuse
without download, and clear errors for missing or corrupt blobs."""

from __future__ import annotations

import collections
import shutil
import threading
from pathlib import Path
from typing import BinaryIO, ClassVar

import pytest

from millstream.checkpoint.checkpoint import CheckpointV2
from millstream.config.settings import Settings
from millstream.contracts.blobstore import BlobStore, BlobStoreFactory
from millstream.embedded.local_blobstore import LocalBlobStore, LocalBlobStoreFactory
from millstream.storage.backends.blobstore.index import SnapshotIndex
from millstream.storage.backends.registry import state_backend_factory_class
from millstream.storage.errors import StateRestoreError
from millstream.storage.layout import checkpoint_dir, checkpoint_dirs
from tests.storage.harness import Opened, StateHarness, state_config

MARKER_KEY = state_backend_factory_class("blobstore", "test").marker_key()


class CountingBlobStore(LocalBlobStore):
    """The local blob store, counting operations per kind (shared by every instance of a test)."""

    calls: ClassVar[collections.Counter[str]] = collections.Counter()
    lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def count(cls, kind: str) -> None:
        with cls.lock:  # transfers run on several threads
            cls.calls[kind] += 1

    def put(self, name: str, source: BinaryIO, size: int) -> str:
        self.count("put-index" if "/index-" in name else "put-file")
        return super().put(name, source, size)

    def get(self, blob_id: str, sink: BinaryIO) -> None:
        self.count("get-index" if "/index-" in blob_id else "get-file")
        super().get(blob_id, sink)

    def delete(self, blob_id: str) -> None:
        self.count("delete")
        super().delete(blob_id)


class CountingBlobStoreFactory(BlobStoreFactory):
    def get_blob_store(self, config: Settings) -> BlobStore:
        local = LocalBlobStoreFactory().get_blob_store(config)
        assert isinstance(local, LocalBlobStore)
        return CountingBlobStore(local.root)


@pytest.fixture
def h(tmp_path: Path) -> StateHarness:
    CountingBlobStore.calls.clear()
    factory = f"{__name__}:CountingBlobStoreFactory"
    return StateHarness(state_config(tmp_path, "blobstore", blob__store__manager__factory=factory))


@pytest.fixture
def strict(tmp_path: Path) -> StateHarness:
    """Recovery from missing blobs off: a start fails naming them."""
    return StateHarness(
        state_config(tmp_path, "blobstore", blob__store__restore__recover__missing__blobs__enabled="false")
    )


def blobs(h: StateHarness) -> set[str]:
    root = Path(h.config["job.data.dir"]) / "blobs"
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def index_of(h: StateHarness, checkpoint: CheckpointV2) -> tuple[str, SnapshotIndex]:
    blob_id = checkpoint.state_checkpoint_markers[MARKER_KEY]["counts"]
    data = (Path(h.config["job.data.dir"]) / "blobs" / blob_id).read_bytes()
    return blob_id, SnapshotIndex.from_bytes(data, "test")


def referenced(h: StateHarness, checkpoint: CheckpointV2) -> set[str]:
    blob_id, index = index_of(h, checkpoint)
    return {blob_id, *index.dir_index.blobs_present()}


def write(opened: Opened, start: int, count: int) -> None:
    opened.store.put_all({f"k{i:06d}": i for i in range(start, start + count)})


def crash(opened: Opened) -> None:
    opened.storage.close()
    opened.container.close()


def committed(h: StateHarness, count: int) -> tuple[Opened, CheckpointV2]:
    """A store holding keys 0..count-1 and the checkpoint of its commit."""
    opened = h.open()
    write(opened, 0, count)
    checkpoint = h.commit(opened)
    assert checkpoint is not None
    return opened, checkpoint


def store_dir(opened: Opened) -> Path:
    return opened.storage.backend_context(["counts"]).stores["counts"].store_dir


def test_each_commit_uploads_only_the_files_new_since_the_last_snapshot(h: StateHarness) -> None:
    opened = h.open()
    write(opened, 0, 1000)
    first = h.commit(opened)
    first_puts = CountingBlobStore.calls["put-file"]
    assert first is not None and first_puts >= 3  # an SST, MANIFEST, OPTIONS, CURRENT...
    first_blob, first_index = index_of(h, first)
    write(opened, 1000, 10)
    second = h.commit(opened)
    assert second is not None
    new_files = CountingBlobStore.calls["put-file"] - first_puts
    _, second_index = index_of(h, second)
    old_sst = {f.file_name for f in first_index.dir_index.files_present if f.file_name.endswith(".sst")}
    kept = {f.file_name for f in second_index.dir_index.files_present} & old_sst
    assert kept == old_sst  # the first SST was not uploaded again
    assert new_files < first_puts + 2 and CountingBlobStore.calls["put-index"] == 2
    assert second_index.prev_snapshot_index_blob_id == first_blob
    opened.close()


def test_files_dropped_from_a_snapshot_are_deleted_only_after_the_checkpoint(h: StateHarness) -> None:
    opened = h.open()
    write(opened, 0, 100)
    first = h.commit(opened)
    assert first is not None
    write(opened, 0, 100)  # rewrites keys: the next snapshot changes MANIFEST, CURRENT stays
    second = h.commit(opened, stop_after="checkpoint")
    assert second is not None
    _, index = index_of(h, second)
    removed = set(index.dir_index.blobs_removed())
    assert removed and removed <= blobs(h)  # checkpoint written, cleanup not yet run: still there
    assert index_of(h, first)[0] in blobs(h)
    opened.storage.cleanup(second.checkpoint_id, second.state_checkpoint_markers)
    assert not removed & blobs(h)
    assert blobs(h) == referenced(h, second)
    opened.close()


def test_a_crash_between_upload_and_checkpoint_leaves_orphans_that_the_restart_collects(h: StateHarness) -> None:
    opened = h.open()
    write(opened, 0, 100)
    committed = h.commit(opened)
    assert committed is not None
    write(opened, 100, 100)
    h.commit(opened, stop_after="upload")  # new blobs uploaded, no checkpoint names them
    h.checkpoint = committed
    assert blobs(h) > referenced(h, committed)
    crash(opened)
    restored = h.open()
    assert dict(restored.store.all()) == {f"k{i:06d}": i for i in range(100)}
    assert blobs(h) == referenced(h, committed)
    restored.close()


def test_a_crash_between_checkpoint_and_cleanup_is_finished_by_the_restart(h: StateHarness) -> None:
    opened = h.open()
    write(opened, 0, 100)
    h.commit(opened)
    write(opened, 0, 100)
    second = h.commit(opened, stop_after="checkpoint")
    assert second is not None
    crash(opened)
    restored = h.open()
    assert blobs(h) == referenced(h, second)
    assert dict(restored.store.all()) == {f"k{i:06d}": i for i in range(100)}
    restored.close()


def test_a_matching_local_checkpoint_dir_is_reused_without_download(h: StateHarness) -> None:
    opened, checkpoint = committed(h, 500)
    write(opened, 500, 10)  # after the checkpoint: must not survive
    directory = store_dir(opened)
    crash(opened)
    assert checkpoint_dir(directory, checkpoint.checkpoint_id).is_dir()
    CountingBlobStore.calls.clear()
    restored = h.open()
    assert CountingBlobStore.calls["get-file"] == 0
    assert dict(restored.store.all()) == {f"k{i:06d}": i for i in range(500)}
    restored.close()


def test_without_local_state_the_snapshot_is_downloaded_and_verified(h: StateHarness) -> None:
    opened, checkpoint = committed(h, 500)
    directory = store_dir(opened)
    crash(opened)
    for path in checkpoint_dirs(directory).values():
        shutil.rmtree(path)
    CountingBlobStore.calls.clear()
    restored = h.open()
    _, index = index_of(h, checkpoint)
    assert CountingBlobStore.calls["get-file"] == len(index.dir_index.files_present)
    assert dict(restored.store.all()) == {f"k{i:06d}": i for i in range(500)}
    restored.close()


def test_a_local_checkpoint_dir_that_differs_from_the_snapshot_is_replaced_by_a_download(h: StateHarness) -> None:
    opened, checkpoint = committed(h, 50)
    directory = store_dir(opened)
    crash(opened)
    local = checkpoint_dir(directory, checkpoint.checkpoint_id)
    (local / "CURRENT").write_text("MANIFEST-999999\n")
    CountingBlobStore.calls.clear()
    restored = h.open()
    assert CountingBlobStore.calls["get-file"] > 0
    assert dict(restored.store.all()) == {f"k{i:06d}": i for i in range(50)}
    restored.close()


def _lose_local_state(opened: Opened) -> None:
    directory = store_dir(opened)
    crash(opened)
    for path in checkpoint_dirs(directory).values():
        shutil.rmtree(path)


def test_a_checksum_mismatch_fails_the_restore_naming_task_store_and_file(h: StateHarness) -> None:
    opened, checkpoint = committed(h, 50)
    _lose_local_state(opened)
    _, index = index_of(h, checkpoint)
    victim = next(f for f in index.dir_index.files_present if f.file_name.endswith(".sst"))
    path = Path(h.config["job.data.dir"]) / "blobs" / victim.blobs[0].blob_id
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(
        StateRestoreError, match=rf"task 'Partition 0' store 'counts': file '{victim.file_name}'.*CRC32"
    ):
        h.open()


def test_without_recovery_a_missing_blob_fails_the_restore_naming_task_store_file_and_blob(
    strict: StateHarness,
) -> None:
    opened, checkpoint = committed(strict, 50)
    _lose_local_state(opened)
    _, index = index_of(strict, checkpoint)
    victim = index.dir_index.files_present[0]
    (Path(strict.config["job.data.dir"]) / "blobs" / victim.blobs[0].blob_id).unlink()
    with pytest.raises(
        StateRestoreError,
        match=rf"task 'Partition 0' store 'counts': file '{victim.file_name}' cannot be restored: blob '.*' is "
        r"missing.*not recovered: blob.store.restore.recover.missing.blobs.enabled is false",
    ):
        strict.open()


def test_without_recovery_a_missing_snapshot_index_fails_naming_task_store_and_blob(strict: StateHarness) -> None:
    opened, checkpoint = committed(strict, 5)
    crash(opened)
    blob_id, _ = index_of(strict, checkpoint)
    (Path(strict.config["job.data.dir"]) / "blobs" / blob_id).unlink()
    with pytest.raises(
        StateRestoreError,
        match=rf"task 'Partition 0' store 'counts': the snapshot index of checkpoint .* is gone: .*blob '{blob_id}' "
        r"is missing.*not recovered",
    ):
        strict.open()


def test_a_store_the_checkpoint_does_not_name_starts_empty_and_its_orphans_are_collected(h: StateHarness) -> None:
    opened = h.open()
    write(opened, 0, 20)
    h.commit(opened, stop_after="upload")  # never checkpointed
    crash(opened)
    assert blobs(h)
    restored = h.open(None)
    assert dict(restored.store.all()) == {}
    assert blobs(h) == set()
    restored.close()

"""Blob-store restore (Samza's ``BlobStoreRestoreManager``).

``init`` reads the snapshot index of every store the checkpoint names. ``restore`` always deletes the
current store directory (it may hold writes after the checkpoint); when the local checkpoint directory
``<store dir>-<CheckpointId>`` holds exactly the snapshot's files (every file's size and CRC32 checked
against the index: a file modified in place keeps its name and size) it is copied into place (SST files
hard-linked), with no download, and kept until the next checkpoint; otherwise every file is downloaded
in parallel into a staging directory, verified (size and CRC32 of every file), and the staging
directory renamed into place. A store the checkpoint does not name starts empty. A snapshot whose blobs
are gone is recovered from what remains (see ``recovery``).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId, CheckpointV2
from millstream.contracts.blobstore_settings import BlobStoreConfig
from millstream.storage.backends.base import StoreSpec, TaskBackendContext, TaskRestoreManager
from millstream.storage.backends.blobstore.diff import are_same_dir, same_file
from millstream.storage.backends.blobstore.index import SnapshotIndex
from millstream.storage.backends.blobstore.recovery import local_checkpoint_of, recovery_enabled, report_missing
from millstream.storage.backends.blobstore.transfer import BlobTransfer, MissingBlobsError, snapshot_size
from millstream.storage.errors import StateRestoreError
from millstream.storage.layout import (
    LOCAL_CHECKPOINT_FILES,
    checkpoint_dir,
    copy_dir,
    delete_checkpoint_dirs,
    delete_path,
)
from millstream.storage.restore_progress import RestoreProgress

log = logging.getLogger(__name__)


class BlobStoreTaskRestoreManager(TaskRestoreManager):
    def __init__(self, context: TaskBackendContext, transfer: BlobTransfer, marker_key: str) -> None:
        self.context = context
        self.transfer = transfer
        self.marker_key = marker_key
        self.checkpoint: CheckpointV2 | None = None
        self.indexes: dict[str, tuple[str, SnapshotIndex]] = {}
        self.compare_owners = context.config.view(BlobStoreConfig).compare_file_owners_on_restore
        self.recover = recovery_enabled(context.config)
        self.lost_index: set[str] = set()
        """Stores whose snapshot index is gone: restored from the local checkpoint directory, or empty."""
        self.reused: set[str] = set()
        """Stores restored from their local checkpoint directory (for tests and logs)."""

    def _where(self, store: str) -> str:
        return f"task '{self.context.task_name}' store '{store}'"

    def init(self, checkpoint: Checkpoint | None) -> None:
        if not isinstance(checkpoint, CheckpointV2):
            return
        self.checkpoint = checkpoint
        markers = checkpoint.state_checkpoint_markers.get(self.marker_key, {})
        for store in self.context.stores:
            blob_id = markers.get(store)
            if blob_id is None:
                continue
            where = self._where(store)
            try:
                data = self.transfer.get_bytes(blob_id, where)
            except MissingBlobsError as error:
                report_missing(
                    self.recover,
                    f"{where}: the snapshot index of checkpoint {checkpoint.checkpoint_id} is gone: {error}",
                    "the store starts from its local checkpoint directory when this host has it, else empty",
                )
                self.lost_index.add(store)
                continue
            self.indexes[store] = (blob_id, SnapshotIndex.from_bytes(data, f"{where} index '{blob_id}'"))

    def restore(self) -> None:
        for store, spec in self.context.stores.items():
            delete_path(spec.store_dir)
            entry = self.indexes.get(store)
            if store in self.lost_index:
                self._restore_without_index(store, spec)
            elif entry is None or self.checkpoint is None:
                delete_checkpoint_dirs(spec.store_dir, listing=self.context.listing)
            elif not self._reuse_local(store, spec, entry[1]):
                delete_checkpoint_dirs(spec.store_dir, listing=self.context.listing)
                self._download(store, spec, *entry)

    def _reuse_local(self, store: str, spec: StoreSpec, index: SnapshotIndex) -> bool:
        """Move the local checkpoint directory into place when it holds exactly the snapshot's files."""
        assert self.checkpoint is not None
        local = checkpoint_dir(spec.store_dir, self.checkpoint.checkpoint_id)
        if spec.config.clean_on_container_start or not local.is_dir():
            return False
        # every checksum, large files too: a file modified in place keeps its name and size
        same, reason = are_same_dir(local, index.dir_index, same_file(True, True))
        if not same:
            log.warning(
                "%s: local checkpoint %s does not match the snapshot (%s): deleting it and downloading",
                self._where(store), local.name, reason,
            )  # fmt: skip
            return False
        _copy_into_place(local, self.checkpoint.checkpoint_id, spec)
        self.reused.add(store)
        log.info("%s: reused local checkpoint %s (no download)", self._where(store), local.name)
        return True

    def _restore_without_index(self, store: str, spec: StoreSpec) -> None:
        assert self.checkpoint is not None
        self.lost_state = True
        local = None
        if not spec.config.clean_on_container_start:
            local = local_checkpoint_of(spec.store_dir, self.checkpoint, self.marker_key, store)
        if local is None:
            delete_checkpoint_dirs(spec.store_dir)
            log.warning("%s: no local copy of the lost snapshot: the store starts empty", self._where(store))
            return
        _copy_into_place(local, self.checkpoint.checkpoint_id, spec)
        self.reused.add(store)
        log.warning("%s: the lost snapshot's local copy %s is the store", self._where(store), local.name)

    def _download(self, store: str, spec: StoreSpec, blob_id: str, index: SnapshotIndex) -> None:
        """Download every file into a staging directory, verify the whole, rename it into place."""
        assert self.checkpoint is not None
        where = self._where(store)
        started = time.monotonic()
        staging = spec.store_dir.with_name(f"{spec.store_dir.name}.restoring")
        delete_path(staging)
        progress = RestoreProgress(
            self.context.metrics, str(self.context.task_name), store, bytes_expected=snapshot_size(index.dir_index)
        )
        try:
            files = self.transfer.download_dir(
                index.dir_index, staging, where, lambda size: progress.advance(size=size)
            )
        except MissingBlobsError as error:
            delete_path(staging)
            report_missing(self.recover, str(error), "the store starts empty")
            self.lost_state = True
            return
        # every file was checked (size, CRC32) as it streamed; this checks the whole: names, owners, nothing extra
        same, reason = are_same_dir(staging, index.dir_index, same_file(False, self.compare_owners), frozenset())
        if not same:
            delete_path(staging)
            raise StateRestoreError(f"{where}: the restored snapshot (index '{blob_id}') does not verify: {reason}")
        os.replace(staging, spec.store_dir)
        progress.finish()
        log.info(
            "%s: restored %d file(s) of snapshot %s from %s in %.2fs",
            where, files, self.checkpoint.checkpoint_id, self.transfer.blob_store.describe(),
            time.monotonic() - started,
        )  # fmt: skip


def _copy_into_place(local: Path, checkpoint_id: CheckpointId, spec: StoreSpec) -> None:
    """Make a copy of a local checkpoint directory the store (SST files hard-linked, its description files
    left out). The directory itself stays until the next checkpoint's cleanup: a crash before then finds
    it again — the only copy there is when the snapshot's blobs are gone."""
    copy_dir(local, spec.store_dir)
    for name in LOCAL_CHECKPOINT_FILES:
        (spec.store_dir / name).unlink(missing_ok=True)
    delete_checkpoint_dirs(spec.store_dir, keep=checkpoint_id)

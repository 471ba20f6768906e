"""Blob-store backup (Samza's ``BlobStoreBackupManager``).

``upload`` diffs the commit's checkpoint directory (``<store dir>-<id>``, made by the engine's
snapshot) against the previous snapshot's index, uploads each new file as a blob, then the new
snapshot index; the index's blob id is the marker that goes into the checkpoint. Nothing is deleted
during an upload: ``cleanup`` runs only once the checkpoint naming the new index is durable, and
deletes the blobs of the files the new snapshot dropped and the previous index.

``init`` also collects orphans: blobs under the store's prefix that the checkpoint does not reference
— left by uploads whose commit never completed (a crash between upload and checkpoint, a zombie
attempt) or by a cleanup a crash cut short. When the checkpoint's snapshot lost blobs (its index, or
files it lists), nothing is deleted at start: the next upload sends every file, and once its checkpoint
is durable everything else under the prefix goes (see ``recovery``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId, CheckpointV1, CheckpointV2
from millstream.storage.backends.base import StoreSpec, TaskBackendContext, TaskBackupManager
from millstream.storage.backends.blobstore.diff import get_dir_diff, same_file
from millstream.storage.backends.blobstore.index import DirIndex, SnapshotIndex, SnapshotMetadata
from millstream.storage.backends.blobstore.recovery import blob_names, recovery_enabled, report_missing
from millstream.storage.backends.blobstore.transfer import (
    BlobTransfer,
    MissingBlobsError,
    file_blob_name,
    index_blob_name,
    store_blob_prefix,
)
from millstream.storage.errors import StateBackupError
from millstream.storage.layout import checkpoint_dir

log = logging.getLogger(__name__)


class BlobStoreTaskBackupManager(TaskBackupManager):
    def __init__(self, context: TaskBackendContext, transfer: BlobTransfer, marker_key: str) -> None:
        self.context = context
        self.transfer = transfer
        self.marker_key = marker_key
        self.stores: dict[str, StoreSpec] = dict(context.stores)
        self.previous: dict[str, tuple[str, SnapshotIndex]] = {}
        """Per store, the last uploaded snapshot index and its blob id: the base of the next diff."""
        self._same_file = same_file(compare_large_checksums=False, compare_owners=True)
        self.recover = recovery_enabled(context.config)
        self.recovering: set[str] = set()
        """Stores whose last snapshot lost blobs: the next upload sends every file, and once that snapshot
        is checkpointed whatever remains of the lost one is deleted."""

    def _where(self, store: str) -> str:
        return f"task '{self.context.task_name}' store '{store}'"

    def init(self, checkpoint: Checkpoint | None) -> None:
        markers = (
            checkpoint.state_checkpoint_markers.get(self.marker_key, {}) if isinstance(checkpoint, CheckpointV2) else {}
        )
        for store in self.stores:
            if isinstance(checkpoint, CheckpointV1):
                log.warning("%s: resumed from a V1 checkpoint; orphaned blobs are not collected", self._where(store))
                continue
            present = set(
                self.transfer.blob_store.list(store_blob_prefix(self.context.config, self.context.task_name, store))
            )
            blob_id = markers.get(store)
            if blob_id is not None and not self._load_previous(store, blob_id, present):
                self.recovering.add(store)
                self.backup_incomplete = True
                continue  # what remains of the lost snapshot goes once a complete one is checkpointed
            self._collect_orphans(store, present)

    def _load_previous(self, store: str, blob_id: str, present: set[str]) -> bool:
        """Read the last snapshot's index as the base of the next diff; False when it or a file it lists
        is gone (then the next upload sends every file again)."""
        where = self._where(store)
        try:
            data = self.transfer.get_bytes(blob_id, where)
        except MissingBlobsError as error:
            report_missing(self.recover, f"{where}: the snapshot index of the last checkpoint is gone: {error}",
                           "every store file is uploaded again")  # fmt: skip
            return False
        index = SnapshotIndex.from_bytes(data, f"{where} index '{blob_id}'")
        missing = set(index.dir_index.blobs_present()) - present
        if missing:
            report_missing(
                self.recover,
                f"{where}: blob(s) {blob_names(missing)} of snapshot index '{blob_id}' are missing from "
                f"{self.transfer.blob_store.describe()}",
                "every store file is uploaded again",
            )
            return False
        self.previous[store] = (blob_id, index)
        return True

    def _collect_orphans(self, store: str, present: set[str] | None = None) -> None:
        prefix = store_blob_prefix(self.context.config, self.context.task_name, store)
        referenced: set[str] = set()
        previous = self.previous.get(store)
        if previous is not None:
            referenced.add(previous[0])
            referenced.update(previous[1].dir_index.blobs_present())
        listed = present if present is not None else self.transfer.blob_store.list(prefix)
        orphans = sorted(blob_id for blob_id in listed if blob_id not in referenced)
        if orphans:
            self.transfer.delete(orphans, self._where(store))
            log.info("%s: deleted %d orphaned blob(s) under '%s'", self._where(store), len(orphans), prefix)

    def snapshot(self, checkpoint_id: CheckpointId) -> dict[str, str]:
        return {}

    def upload(self, checkpoint_id: CheckpointId, markers: Mapping[str, str]) -> dict[str, str]:
        job = self.context.config.job
        uploaded = {}
        for store, spec in self.stores.items():
            where = self._where(store)
            directory = checkpoint_dir(spec.store_dir, checkpoint_id)
            if not directory.is_dir():
                raise StateBackupError(f"{where}: checkpoint directory '{directory}' does not exist")
            previous = self.previous.get(store)
            diff = get_dir_diff(directory, previous[1].dir_index if previous else DirIndex(""), self._same_file)
            prefix = store_blob_prefix(self.context.config, self.context.task_name, store)
            started = time.monotonic()
            dir_index = self.transfer.upload_dir(
                diff,
                lambda path, prefix=prefix: file_blob_name(prefix, checkpoint_id, path),  # type: ignore[misc]
                where,
                lambda: self.context.pause("mid-upload"),
            )
            index = SnapshotIndex(
                time.time_ns() // 1_000_000,
                SnapshotMetadata(checkpoint_id, job.name, job.id, self.context.task_name, store),
                dir_index,
                previous[0] if previous else None,
            )
            blob_id = self.transfer.put_bytes(index_blob_name(prefix, checkpoint_id), index.to_bytes(), where)
            self.previous[store] = (blob_id, index)
            uploaded[store] = blob_id
            log.debug(
                "%s: uploaded %d new file(s), kept %d, dropped %d in %.3fs",
                where, len(diff.added_files()), len(diff.files_retained), len(diff.files_removed),
                time.monotonic() - started,
            )  # fmt: skip
        return uploaded

    def cleanup(self, checkpoint_id: CheckpointId, markers: Mapping[str, str]) -> None:
        for store, blob_id in markers.items():
            if store not in self.stores:
                continue
            where = self._where(store)
            previous = self.previous.get(store)
            if store in self.recovering:
                if previous is not None and previous[0] == blob_id:  # the first complete snapshot is durable
                    self._collect_orphans(store)
                    self.recovering.discard(store)
                continue  # the lost snapshot has no cleanup of its own
            if previous is not None and previous[0] == blob_id:
                index = previous[1]
            else:
                index = SnapshotIndex.from_bytes(self.transfer.get_bytes(blob_id, where), f"{where} index '{blob_id}'")
            doomed = list(index.dir_index.blobs_removed())
            if index.prev_snapshot_index_blob_id:
                doomed.append(index.prev_snapshot_index_blob_id)
            self.transfer.delete(doomed, where)

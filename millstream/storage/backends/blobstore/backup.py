"""Blob-store backup (Samza's ``BlobStoreBackupManager``).

``upload`` diffs the commit's checkpoint directory (``<store dir>-<id>``, made by the engine's
snapshot) against the previous snapshot's index, uploads each new file as a blob, then the new
snapshot index; the index's blob id is the marker that goes into the checkpoint. Nothing is deleted
during an upload: ``cleanup`` runs only once the checkpoint naming the new index is durable, and
deletes the blobs of the files the new snapshot dropped and the previous index.

``init`` also collects orphans: blobs under the store's prefix that the checkpoint does not reference
— left by uploads whose commit never completed (a crash between upload and checkpoint, a zombie
attempt) or by a cleanup a crash cut short.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId, CheckpointV1, CheckpointV2
from millstream.config.views import JobConfig
from millstream.storage.backends.base import StoreSpec, TaskBackendContext, TaskBackupManager
from millstream.storage.backends.blobstore.diff import get_dir_diff, same_file
from millstream.storage.backends.blobstore.index import DirIndex, SnapshotIndex, SnapshotMetadata
from millstream.storage.backends.blobstore.transfer import (
    BlobTransfer,
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

    def _where(self, store: str) -> str:
        return f"task '{self.context.task_name}' store '{store}'"

    def init(self, checkpoint: Checkpoint | None) -> None:
        markers = (
            checkpoint.state_checkpoint_markers.get(self.marker_key, {}) if isinstance(checkpoint, CheckpointV2) else {}
        )
        for store in self.stores:
            blob_id = markers.get(store)
            if blob_id is not None:
                data = self.transfer.get_bytes(blob_id, self._where(store))
                self.previous[store] = (
                    blob_id,
                    SnapshotIndex.from_bytes(data, f"{self._where(store)} index '{blob_id}'"),
                )
            if isinstance(checkpoint, CheckpointV1):
                log.warning("%s: resumed from a V1 checkpoint; orphaned blobs are not collected", self._where(store))
            else:
                self._collect_orphans(store)

    def _collect_orphans(self, store: str) -> None:
        prefix = store_blob_prefix(self.context.config, self.context.task_name, store)
        referenced: set[str] = set()
        previous = self.previous.get(store)
        if previous is not None:
            referenced.add(previous[0])
            referenced.update(previous[1].dir_index.blobs_present())
        orphans = [blob_id for blob_id in self.transfer.blob_store.list(prefix) if blob_id not in referenced]
        if orphans:
            self.transfer.delete(orphans, self._where(store))
            log.info("%s: deleted %d orphaned blob(s) under '%s'", self._where(store), len(orphans), prefix)

    def snapshot(self, checkpoint_id: CheckpointId) -> dict[str, str]:
        return {}

    def upload(self, checkpoint_id: CheckpointId, markers: Mapping[str, str]) -> dict[str, str]:
        job = JobConfig.of(self.context.config)
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
            if previous is not None and previous[0] == blob_id:
                index = previous[1]
            else:
                index = SnapshotIndex.from_bytes(self.transfer.get_bytes(blob_id, where), f"{where} index '{blob_id}'")
            doomed = list(index.dir_index.blobs_removed())
            if index.prev_snapshot_index_blob_id:
                doomed.append(index.prev_snapshot_index_blob_id)
            self.transfer.delete(doomed, where)

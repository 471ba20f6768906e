"""Blob-store restore (Samza's ``BlobStoreRestoreManager``).

``init`` reads the snapshot index of every store the checkpoint names. ``restore`` always deletes the
current store directory (it may hold writes after the checkpoint); when the local checkpoint directory
``<store dir>-<CheckpointId>`` holds exactly the snapshot's files it is moved into place, with no
download; otherwise every file is downloaded in parallel into a staging directory, verified (size and
CRC32 of every file), and the staging directory renamed into place. A store the checkpoint does not
name starts empty.
"""

from __future__ import annotations

import logging
import os
import time

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId, CheckpointV2
from millstream.config.views import BlobStoreConfig
from millstream.storage.backends.base import TaskBackendContext, TaskRestoreManager
from millstream.storage.backends.blobstore.diff import are_same_dir, same_file
from millstream.storage.backends.blobstore.index import SnapshotIndex
from millstream.storage.backends.blobstore.transfer import BlobTransfer
from millstream.storage.errors import StateRestoreError
from millstream.storage.layout import LOCAL_CHECKPOINT_FILES, checkpoint_dir, delete_checkpoint_dirs, delete_path

log = logging.getLogger(__name__)


class BlobStoreTaskRestoreManager(TaskRestoreManager):
    def __init__(self, context: TaskBackendContext, transfer: BlobTransfer, marker_key: str) -> None:
        self.context = context
        self.transfer = transfer
        self.marker_key = marker_key
        self.checkpoint_id: CheckpointId | None = None
        self.indexes: dict[str, tuple[str, SnapshotIndex]] = {}
        self.compare_owners = BlobStoreConfig.of(context.config).compare_file_owners_on_restore
        self.reused: set[str] = set()
        """Stores restored from their local checkpoint directory (for tests and logs)."""

    def _where(self, store: str) -> str:
        return f"task '{self.context.task_name}' store '{store}'"

    def init(self, checkpoint: Checkpoint | None) -> None:
        if not isinstance(checkpoint, CheckpointV2):
            return
        self.checkpoint_id = checkpoint.checkpoint_id
        markers = checkpoint.state_checkpoint_markers.get(self.marker_key, {})
        for store in self.context.stores:
            blob_id = markers.get(store)
            if blob_id is not None:
                where = self._where(store)
                data = self.transfer.get_bytes(blob_id, where)
                self.indexes[store] = (blob_id, SnapshotIndex.from_bytes(data, f"{where} index '{blob_id}'"))

    def restore(self) -> None:
        for store, spec in self.context.stores.items():
            where = self._where(store)
            started = time.monotonic()
            delete_path(spec.store_dir)
            entry = self.indexes.get(store)
            if entry is None or self.checkpoint_id is None:
                delete_checkpoint_dirs(spec.store_dir)
                continue
            blob_id, index = entry
            local = checkpoint_dir(spec.store_dir, self.checkpoint_id)
            if not spec.config.clean_on_container_start and local.is_dir():
                same, reason = are_same_dir(local, index.dir_index, same_file(False, True))
                if same:
                    for name in LOCAL_CHECKPOINT_FILES:
                        (local / name).unlink(missing_ok=True)
                    os.replace(local, spec.store_dir)
                    delete_checkpoint_dirs(spec.store_dir)
                    self.reused.add(store)
                    log.info("%s: reused local checkpoint %s (no download)", where, local.name)
                    continue
                log.info(
                    "%s: local checkpoint %s does not match the snapshot (%s): downloading", where, local.name, reason
                )
            delete_checkpoint_dirs(spec.store_dir)
            staging = spec.store_dir.with_name(f"{spec.store_dir.name}.restoring")
            delete_path(staging)
            files = self.transfer.download_dir(index.dir_index, staging, where)
            # every file was checked (size, CRC32) as it streamed; this checks the whole: names, owners, nothing extra
            same, reason = are_same_dir(staging, index.dir_index, same_file(False, self.compare_owners), frozenset())
            if not same:
                delete_path(staging)
                raise StateRestoreError(f"{where}: the restored snapshot (index '{blob_id}') does not verify: {reason}")
            os.replace(staging, spec.store_dir)
            log.info(
                "%s: restored %d file(s) of snapshot %s from %s in %.2fs",
                where, files, self.checkpoint_id, self.transfer.blob_store.describe(), time.monotonic() - started,
            )  # fmt: skip

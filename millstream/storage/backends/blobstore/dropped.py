"""The snapshots of stores the blob store no longer backs up (Samza deletes them when a restore starts).

A store removed from the config, or whose ``stores.<s>.backup.factories`` no longer lists the blob
store, would otherwise keep its last snapshot forever. The stores are found from the task's last
checkpoint (its blob-store markers) and from the task's folder in the blob store (which also finds
stores whose marker an earlier checkpoint already dropped, e.g. after a crash between that checkpoint
and this deletion). Their blobs — the snapshot index, the files it lists, and anything else under the
store's prefix — are deleted once the task's first new checkpoint is durable.
"""

from __future__ import annotations

import logging

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointV2
from millstream.config.settings import Settings
from millstream.model import TaskName
from millstream.storage.backends.base import DroppedStores
from millstream.storage.backends.blobstore.index import SnapshotIndex
from millstream.storage.backends.blobstore.transfer import BlobTransfer, MissingBlobsError, store_blob_prefix

log = logging.getLogger(__name__)


class BlobStoreDroppedStores(DroppedStores):
    def __init__(
        self, config: Settings, task_name: TaskName, backed_up: frozenset[str], transfer: BlobTransfer, marker_key: str
    ) -> None:
        self.config = config
        self.task_name = task_name
        self.backed_up = backed_up
        self.transfer = transfer
        self.marker_key = marker_key
        self.found: dict[str, str | None] = {}
        """Dropped store → the snapshot index the last checkpoint names for it (None: none)."""

    def _where(self, store: str) -> str:
        return f"task '{self.task_name}' store '{store}' (no longer backed up by the blob store)"

    def find(self, checkpoint: Checkpoint | None) -> list[str]:
        markers = (
            checkpoint.state_checkpoint_markers.get(self.marker_key, {}) if isinstance(checkpoint, CheckpointV2) else {}
        )
        found: dict[str, str | None] = {
            store: blob_id for store, blob_id in markers.items() if store not in self.backed_up
        }
        task_prefix = store_blob_prefix(self.config, self.task_name, "")
        for blob_id in self.transfer.blob_store.list(task_prefix):
            store = blob_id[len(task_prefix) :].split("/", 1)[0]
            if store and store not in self.backed_up:
                found.setdefault(store, None)
        self.found = found
        return sorted(found)

    def delete(self) -> None:
        for store, index_blob in sorted(self.found.items()):
            where = self._where(store)
            doomed: list[str] = []
            if index_blob is not None:
                doomed.extend(self._listed_by(index_blob, where))
                doomed.append(index_blob)
            doomed.extend(self.transfer.blob_store.list(store_blob_prefix(self.config, self.task_name, store)))
            count = self.transfer.delete(doomed, where)
            log.info("%s: deleted its snapshot (%d blob(s))", where, count)
        self.found.clear()

    def _listed_by(self, index_blob: str, where: str) -> list[str]:
        """The files of the snapshot (also those outside the store's prefix, e.g. under an older
        ``blob.store.prefix``); none when the index itself is gone."""
        try:
            data = self.transfer.get_bytes(index_blob, where)
        except MissingBlobsError:
            return []
        return list(SnapshotIndex.from_bytes(data, f"{where} index '{index_blob}'").dir_index.blobs_present())

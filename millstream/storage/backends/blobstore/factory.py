"""``blobstore`` (or Samza's ``org.apache.samza.storage.blobstore.BlobStoreStateBackendFactory``).

One blob store client and one pool of ``blob.store.transfer.threads`` per container, shared by its
tasks' managers. Only persistent stores can use it (it backs up files), and only with version 2 in
``task.checkpoint.read.versions`` ahead of 1: V1 checkpoints carry no snapshot, so a job reading them
could never restore its stores.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

from millstream.config.settings import Settings
from millstream.config.views import StoreConfig
from millstream.contracts.blobstore import RetryPolicy, blob_store
from millstream.contracts.blobstore_settings import BlobStoreConfig
from millstream.contracts.metadata import MetadataStore
from millstream.errors import ConfigError
from millstream.job_model import JobModel
from millstream.model import TaskName
from millstream.storage.backends.base import (
    AdminSource,
    DroppedStores,
    StateBackendAdmin,
    StateBackendFactory,
    TaskBackendContext,
    TaskBackupManager,
    TaskRestoreManager,
)
from millstream.storage.backends.blobstore.admin import BlobStoreStateBackendAdmin
from millstream.storage.backends.blobstore.backup import BlobStoreTaskBackupManager
from millstream.storage.backends.blobstore.dropped import BlobStoreDroppedStores
from millstream.storage.backends.blobstore.restore import BlobStoreTaskRestoreManager
from millstream.storage.backends.blobstore.transfer import BlobTransfer


class BlobStoreStateBackendFactory(StateBackendFactory):
    checkpoint_name: ClassVar[str] = "org.apache.samza.storage.blobstore.BlobStoreStateBackendFactory"
    commits_in_transaction: ClassVar[bool] = False
    """Uploads run beside processing and finish after the commit that snapshotted them; a transaction committed
    every 100 ms cannot wait for them, so exactly-once refuses blob-store stores (use the changelog backend)."""
    requires_checkpoint_v2: ClassVar[bool] = True

    def __init__(self) -> None:
        self._transfer: BlobTransfer | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def validate_store(self, config: Settings, store: str, store_config: StoreConfig, persistent: bool) -> None:
        if not persistent:
            raise ConfigError(
                f"store '{store}' uses the blob store backend, which backs up store files, but its factory "
                f"'{store_config.factory}' keeps no files (use rocksdb, or the changelog backend)"
            )
        read = config.task.checkpoint_read_versions
        if 2 not in read or (1 in read and read.index(1) < read.index(2)):
            raise ConfigError(
                f"store '{store}' uses the blob store backend, which only V2 checkpoints describe, but "
                f"task.checkpoint.read.versions is '{','.join(map(str, read))}': put 2 first (e.g. '2' or '2,1')"
            )
        write = config.task.checkpoint_write_versions
        if 2 not in write:
            raise ConfigError(
                f"store '{store}' uses the blob store backend, but task.checkpoint.write.versions "
                f"'{','.join(map(str, write))}' does not write V2 checkpoints"
            )
        config.view(BlobStoreConfig)

    def transfer(self, config: Settings) -> BlobTransfer:
        with self._lock:
            if self._transfer is None:
                threads = config.view(BlobStoreConfig).transfer_threads
                self._executor = ThreadPoolExecutor(threads, thread_name_prefix="blob-transfer")
                self._transfer = BlobTransfer(blob_store(config), RetryPolicy.of(config), self._executor)
            return self._transfer

    def get_backup_manager(self, context: TaskBackendContext) -> TaskBackupManager:
        return BlobStoreTaskBackupManager(context, self.transfer(context.config), self.marker_key())

    def get_restore_manager(self, context: TaskBackendContext) -> TaskRestoreManager:
        return BlobStoreTaskRestoreManager(context, self.transfer(context.config), self.marker_key())

    def get_admin(
        self,
        config: Settings,
        job_model: JobModel,
        metadata_store: MetadataStore,
        stores: Mapping[str, StoreConfig],
        admins: AdminSource,
    ) -> StateBackendAdmin:
        return BlobStoreStateBackendAdmin(config)

    def dropped_stores(self, config: Settings, task_name: TaskName, backed_up: frozenset[str]) -> DroppedStores:
        return BlobStoreDroppedStores(config, task_name, backed_up, self.transfer(config), self.marker_key())

    def close(self) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True, cancel_futures=True)
            if self._transfer is not None:
                self._transfer.blob_store.close()
            self._executor = None
            self._transfer = None

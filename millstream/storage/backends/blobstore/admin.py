"""The blob store's job-level resource: its bucket or container, created when missing."""

from __future__ import annotations

from millstream.config.settings import Settings
from millstream.contracts.blobstore import blob_store
from millstream.storage.backends.base import StateBackendAdmin
from millstream.storage.backends.blobstore.transfer import store_blob_prefix


class BlobStoreStateBackendAdmin(StateBackendAdmin):
    def __init__(self, config: Settings) -> None:
        self.config = config

    def create_resources(self) -> None:
        store = blob_store(self.config)
        try:
            store.create()
        finally:
            store.close()

    def validate_resources(self) -> None:
        store = blob_store(self.config)
        try:
            store.list(f"{store_blob_prefix(self.config, '', '')}.validate/")
        finally:
            store.close()

"""A blob store in a local (or mounted network) directory: the default, and the fastest to restore from.

A blob id is a relative path under ``blob.store.local.dir`` (default ``<job.data.dir>/blobs``). A put
writes a temporary file beside the blob, fsyncs and renames it, so a blob is either absent or whole; a
crash can leave a temporary file, which ``list`` reports like any blob so a cleanup collects it.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import BinaryIO

from millstream.config.settings import Settings
from millstream.contracts.blobstore import BlobNotFoundError, BlobStore, BlobStoreError, BlobStoreFactory
from millstream.contracts.blobstore_settings import BlobStoreConfig

CHUNK = 1 << 20


class LocalBlobStore(BlobStore):
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def describe(self) -> str:
        return f"local blob store '{self.root}'"

    def _path(self, blob_id: str) -> Path:
        parts = blob_id.split("/")
        if not blob_id or any(part in ("", ".", "..") for part in parts):
            raise BlobStoreError(f"{self.describe()}: '{blob_id}' is not a valid blob id")
        return self.root.joinpath(*parts)

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def put(self, name: str, source: BinaryIO, size: int) -> str:
        path = self._path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex[:8]}")
        try:
            with open(temporary, "wb") as file:
                shutil.copyfileobj(source, file, CHUNK)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except OSError as error:
            temporary.unlink(missing_ok=True)
            raise BlobStoreError(f"{self.describe()}: cannot write blob '{name}': {error}") from None
        return name

    def get(self, blob_id: str, sink: BinaryIO) -> None:
        path = self._path(blob_id)
        try:
            with open(path, "rb") as file:
                shutil.copyfileobj(file, sink, CHUNK)
        except FileNotFoundError:
            raise BlobNotFoundError(f"{self.describe()}: blob '{blob_id}' does not exist") from None
        except OSError as error:
            raise BlobStoreError(f"{self.describe()}: cannot read blob '{blob_id}': {error}") from None

    def delete(self, blob_id: str) -> None:
        self._path(blob_id).unlink(missing_ok=True)

    def list(self, prefix: str) -> list[str]:
        folder = prefix.rpartition("/")[0]
        start = self.root.joinpath(*folder.split("/")) if folder else self.root
        found: list[str] = []
        for directory, _dirs, files in os.walk(start):
            base = Path(directory).relative_to(self.root).as_posix()
            base = "" if base == "." else base + "/"
            found.extend(base + name for name in files if (base + name).startswith(prefix))
        return sorted(found)


class LocalBlobStoreFactory(BlobStoreFactory):
    """``blob.store.manager.factory=local``."""

    def get_blob_store(self, config: Settings) -> BlobStore:
        configured = config.view(BlobStoreConfig).local_dir
        root = Path(configured) if configured else Path(config.job.data_dir) / "blobs"
        return LocalBlobStore(root.expanduser().resolve())

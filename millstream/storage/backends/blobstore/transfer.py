"""Moving store files to and from a blob store: one blob per file, in parallel, with retries, CRC32
computed while the bytes stream (no second read), and every downloaded file verified against its
index entry (size and checksum) before a restore may use it.

Blob names: ``[<blob.store.prefix>/]<job name>-<job id>/<task>/<store>/<CheckpointId>/<random>-<file>``
for files and ``.../<CheckpointId>/index-<random>.json`` for snapshot indexes, so everything a store
ever uploaded lies under one prefix, which is what lets a restart find and delete orphans.
"""

from __future__ import annotations

import io
import os
import uuid
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future, as_completed
from pathlib import Path
from typing import BinaryIO

from millstream.checkpoint.checkpoint import CheckpointId
from millstream.config.settings import Settings
from millstream.contracts.blobstore import BlobNotFoundError, BlobStore, BlobStoreError, RetryPolicy
from millstream.contracts.blobstore_settings import BlobStoreConfig
from millstream.storage.backends.blobstore.diff import DirDiff, file_metadata
from millstream.storage.backends.blobstore.index import DirIndex, FileBlob, FileIndex
from millstream.storage.errors import StateBackupError, StateRestoreError
from millstream.storage.layout import task_dir_name


def store_blob_prefix(config: Settings, task_name: str, store: str) -> str:
    job = config.job
    base = config.view(BlobStoreConfig).prefix.strip("/")
    return "/".join(part for part in (base, job.job_key, task_dir_name(task_name), store) if part) + "/"


def file_blob_name(prefix: str, checkpoint_id: CheckpointId, path: Path) -> str:
    return f"{prefix}{checkpoint_id}/{uuid.uuid4().hex[:12]}-{path.name}"


def index_blob_name(prefix: str, checkpoint_id: CheckpointId) -> str:
    return f"{prefix}{checkpoint_id}/index-{uuid.uuid4().hex[:12]}.json"


class MissingBlobsError(StateRestoreError):
    """Blobs a snapshot needs are gone from the blob store (deleted by hand, by a lifecycle rule...):
    unlike a corrupt or unreachable blob, a start may recover from this (see ``recovery``)."""

    def __init__(self, message: str, blob_ids: Iterable[str]) -> None:
        super().__init__(message)
        self.blob_ids = tuple(blob_ids)


class _ChecksumReader(io.RawIOBase):
    """Reads a file once, computing CRC32 and size of what was read."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self.crc = 0
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = self._file.readinto(buffer)  # type: ignore[attr-defined]
        if count:
            self.crc = zlib.crc32(buffer[:count], self.crc)
            self.size += count
        return count or 0


class _ChecksumWriter(io.RawIOBase):
    """Writes sequentially (not seekable), computing CRC32 and size of what was written."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self.crc = 0
        self.size = 0

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        self.crc = zlib.crc32(data, self.crc)
        written = self._file.write(data)
        self.size += len(data)
        return written if written is not None else len(data)


class BlobTransfer:
    """Uploads and downloads for one backend instance; ``where`` prefixes every error message."""

    def __init__(self, blob_store: BlobStore, retry: RetryPolicy, executor: Executor) -> None:
        self.blob_store = blob_store
        self.retry = retry
        self.executor = executor

    def upload_file(self, path: Path, name: str, where: str) -> FileIndex:
        metadata = file_metadata(path)

        def attempt() -> FileIndex:
            with open(path, "rb") as file:
                reader = _ChecksumReader(file)
                blob_id = self.blob_store.put(name, io.BufferedReader(reader, 1 << 20), metadata.size)
            if reader.size != metadata.size:
                raise StateBackupError(f"{where}: file '{path}' changed size during its upload")
            return FileIndex(path.name, (FileBlob(blob_id, 0),), metadata, reader.crc)

        try:
            return self.retry.run(attempt, f"{where}: upload of '{path}'")
        except (BlobStoreError, OSError) as error:
            raise StateBackupError(f"{where}: cannot upload file '{path}': {error}") from error

    def upload_dir(
        self, diff: DirDiff, name_for: Callable[[Path], str], where: str, after_file: Callable[[], None]
    ) -> DirIndex:
        """Upload every added file of ``diff`` (in parallel) and return the new snapshot's ``DirIndex``."""
        futures: dict[Future[FileIndex], Path] = {
            self.executor.submit(self.upload_file, path, name_for(path), where): path for path in diff.added_files()
        }
        uploaded: dict[Path, FileIndex] = {}
        failure: BaseException | None = None
        for future in as_completed(futures):
            try:
                uploaded[futures[future]] = future.result()
            except BaseException as error:  # the first failure is raised once every upload ended
                failure = failure or error
            else:
                after_file()
        if failure is not None:
            raise failure
        return _built(diff, uploaded)

    def put_bytes(self, name: str, data: bytes, where: str) -> str:
        try:
            return self.retry.run(
                lambda: self.blob_store.put(name, io.BytesIO(data), len(data)), f"{where}: put '{name}'"
            )
        except BlobStoreError as error:
            raise StateBackupError(f"{where}: cannot upload '{name}': {error}") from error

    def get_bytes(self, blob_id: str, where: str) -> bytes:
        def attempt() -> bytes:
            sink = io.BytesIO()
            self.blob_store.get(blob_id, sink)
            return sink.getvalue()

        try:
            return self.retry.run(attempt, f"{where}: get '{blob_id}'")
        except BlobNotFoundError as error:
            raise MissingBlobsError(
                f"{where}: blob '{blob_id}' is missing from {self.blob_store.describe()}", [blob_id]
            ) from error
        except BlobStoreError as error:
            raise StateRestoreError(f"{where}: cannot read blob '{blob_id}': {error}") from error

    def delete(self, blob_ids: Iterable[str], where: str) -> int:
        """Delete blobs in parallel (absent ones are fine); returns how many were asked for."""
        ids = list(dict.fromkeys(blob_ids))
        futures = [
            self.executor.submit(
                self.retry.run, lambda b=blob_id: self.blob_store.delete(b), f"{where}: delete '{blob_id}'"
            )
            for blob_id in ids
        ]
        for future in futures:
            try:
                future.result()
            except BlobStoreError as error:
                raise StateBackupError(f"{where}: cannot delete blob: {error}") from error
        return len(ids)

    def download_dir(
        self, index: DirIndex, target: Path, where: str, progress: Callable[[int], None] = lambda size: None
    ) -> int:
        """Recreate ``index`` under ``target`` (files and empty directories), verifying every file;
        ``progress`` hears each file's size once it is downloaded (from the transfer threads)."""
        jobs: list[tuple[FileIndex, Path]] = []
        _plan(index, target, jobs)
        futures = [self.executor.submit(self._download_file, file, path, where, progress) for file, path in jobs]
        failure: BaseException | None = None
        missing: list[MissingBlobsError] = []
        for future in futures:
            try:
                future.result()
            except MissingBlobsError as error:  # every missing blob is named, not only the first
                missing.append(error)
            except BaseException as error:  # report the first failure once every download ended
                failure = failure or error
        if failure is not None:
            raise failure
        if missing:
            blob_ids = [blob_id for error in missing for blob_id in error.blob_ids]
            raise MissingBlobsError("; ".join(str(error) for error in missing), blob_ids)
        return len(jobs)

    def _download_file(self, file: FileIndex, path: Path, where: str, progress: Callable[[int], None]) -> None:
        blobs = sorted(file.blobs, key=lambda blob: blob.offset)

        def attempt() -> tuple[int, int]:
            with open(path, "wb") as sink:
                writer = _ChecksumWriter(sink)
                for blob in blobs:
                    self.blob_store.get(blob.blob_id, writer)  # type: ignore[arg-type]
                sink.flush()
                os.fsync(sink.fileno())
            return writer.crc, writer.size

        names = ", ".join(blob.blob_id for blob in blobs)
        try:
            crc, size = self.retry.run(attempt, f"{where}: download of '{path.name}'")
        except BlobNotFoundError as error:
            raise MissingBlobsError(
                f"{where}: file '{path.name}' cannot be restored: blob '{names}' is missing from "
                f"{self.blob_store.describe()}",
                [blob.blob_id for blob in blobs],
            ) from error
        except (BlobStoreError, OSError) as error:
            raise StateRestoreError(f"{where}: cannot download file '{path.name}' (blob '{names}'): {error}") from error
        if size != file.metadata.size or crc != file.checksum:
            raise StateRestoreError(
                f"{where}: file '{path.name}' (blob '{names}') failed verification: expected {file.metadata.size} "
                f"bytes with CRC32 {file.checksum}, downloaded {size} bytes with CRC32 {crc}"
            )
        os.chmod(path, _mode(file.metadata.permissions))
        progress(size)


def _built(diff: DirDiff, uploaded: dict[Path, FileIndex]) -> DirIndex:
    present = [*diff.files_retained, *(uploaded[path] for path in diff.files_added)]
    return DirIndex(
        diff.dir_name,
        tuple(sorted(present, key=lambda file: file.file_name)),
        tuple(diff.files_removed),
        tuple(_built(sub_dir, uploaded) for sub_dir in (*diff.sub_dirs_added, *diff.sub_dirs_retained)),
        tuple(diff.sub_dirs_removed),
    )


def snapshot_size(index: DirIndex) -> int:
    """The bytes a download of ``index`` writes: every file present, subdirectories included."""
    return sum(file.metadata.size for file in index.files_present) + sum(
        snapshot_size(sub_dir) for sub_dir in index.sub_dirs_present
    )


def _plan(index: DirIndex, target: Path, jobs: list[tuple[FileIndex, Path]]) -> None:
    target.mkdir(parents=True, exist_ok=True)
    jobs.extend((file, target / file.file_name) for file in index.files_present)
    for sub_dir in index.sub_dirs_present:
        _plan(sub_dir, target / sub_dir.dir_name, jobs)


def _mode(permissions: str) -> int:
    mode = 0
    for index, char in enumerate(permissions[:9]):
        if char != "-":
            mode |= 1 << (8 - index)
    return mode or 0o644

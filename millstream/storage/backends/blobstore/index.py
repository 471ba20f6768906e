"""The snapshot index: what one store's snapshot consists of, uploaded as a JSON blob whose id is the
store's state checkpoint marker. Samza's ``SnapshotIndex`` with its dashed JSON keys.

A ``DirIndex`` lists the files present (each a blob, with its size, permissions, owners and CRC32)
and the files removed since the previous snapshot (whose blobs are deleted once the checkpoint that no
longer needs them is durable), recursively for subdirectories. ``prev-snapshot-index-blob-id`` links
to the previous snapshot's index, deleted at the same time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from millstream.checkpoint.checkpoint import CheckpointId
from millstream.errors import MillstreamError

INDEX_VERSION = 1


class SnapshotIndexFormatError(MillstreamError):
    """A snapshot index blob could not be read; names where it came from."""


@dataclass(frozen=True)
class FileBlob:
    blob_id: str
    offset: int = 0


@dataclass(frozen=True)
class FileMetadata:
    creation_time_ms: int
    last_modified_time_ms: int
    size: int
    owner: str
    group: str
    permissions: str
    """``rwxr-x---`` style, as Java's PosixFilePermissions prints them."""


@dataclass(frozen=True)
class FileIndex:
    file_name: str
    blobs: tuple[FileBlob, ...]
    metadata: FileMetadata
    checksum: int
    """CRC32 of the whole file."""


@dataclass(frozen=True)
class DirIndex:
    dir_name: str
    files_present: tuple[FileIndex, ...] = ()
    files_removed: tuple[FileIndex, ...] = ()
    sub_dirs_present: tuple[DirIndex, ...] = ()
    sub_dirs_removed: tuple[DirIndex, ...] = ()

    def blobs_present(self) -> Iterator[str]:
        """Every blob the directory's present files (recursively) consist of."""
        for file in self.files_present:
            yield from (blob.blob_id for blob in file.blobs)
        for sub_dir in self.sub_dirs_present:
            yield from sub_dir.blobs_present()

    def blobs_removed(self) -> Iterator[str]:
        """Every blob this snapshot dropped: removed files, and everything in removed subdirectories."""
        for file in self.files_removed:
            yield from (blob.blob_id for blob in file.blobs)
        for sub_dir in self.sub_dirs_present:
            yield from sub_dir.blobs_removed()
        for sub_dir in self.sub_dirs_removed:
            yield from sub_dir.blobs_present()


@dataclass(frozen=True)
class SnapshotMetadata:
    checkpoint_id: CheckpointId
    job_name: str
    job_id: str
    task_name: str
    store_name: str


@dataclass(frozen=True)
class SnapshotIndex:
    creation_time_ms: int
    metadata: SnapshotMetadata
    dir_index: DirIndex
    prev_snapshot_index_blob_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_bytes(self) -> bytes:
        metadata = self.metadata
        return orjson.dumps(
            {
                "version": INDEX_VERSION,
                "creation-time-millis": self.creation_time_ms,
                "snapshot-metadata": {
                    "version": INDEX_VERSION,
                    "checkpoint-id": str(metadata.checkpoint_id),
                    "job-name": metadata.job_name,
                    "job-id": metadata.job_id,
                    "task-name": metadata.task_name,
                    "store-name": metadata.store_name,
                },
                "dir-index": _dir_to_json(self.dir_index),
                "prev-snapshot-index-blob-id": self.prev_snapshot_index_blob_id,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> SnapshotIndex:
        try:
            document = orjson.loads(data)
            metadata = document["snapshot-metadata"]
            return cls(
                int(document["creation-time-millis"]),
                SnapshotMetadata(
                    CheckpointId.parse(metadata["checkpoint-id"]),
                    metadata["job-name"],
                    metadata["job-id"],
                    metadata["task-name"],
                    metadata["store-name"],
                ),
                _dir_from_json(document["dir-index"]),
                document.get("prev-snapshot-index-blob-id"),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError, MillstreamError) as error:
            raise SnapshotIndexFormatError(f"{where}: not a valid snapshot index: {error}") from None


def _file_to_json(file: FileIndex) -> dict[str, Any]:
    metadata = file.metadata
    return {
        "file-name": file.file_name,
        "blobs": [{"blob-id": blob.blob_id, "offset": blob.offset} for blob in file.blobs],
        "file-metadata": {
            "creation-time-millis": metadata.creation_time_ms,
            "last-modified-time-millis": metadata.last_modified_time_ms,
            "size": metadata.size,
            "owner": metadata.owner,
            "group": metadata.group,
            "permissions": metadata.permissions,
        },
        "checksum": file.checksum,
    }


def _file_from_json(document: dict[str, Any]) -> FileIndex:
    metadata = document["file-metadata"]
    return FileIndex(
        document["file-name"],
        tuple(FileBlob(blob["blob-id"], int(blob.get("offset", 0))) for blob in document["blobs"]),
        FileMetadata(
            int(metadata["creation-time-millis"]),
            int(metadata["last-modified-time-millis"]),
            int(metadata["size"]),
            str(metadata["owner"]),
            str(metadata["group"]),
            str(metadata["permissions"]),
        ),
        int(document["checksum"]),
    )


def _dir_to_json(directory: DirIndex) -> dict[str, Any]:
    return {
        "version": INDEX_VERSION,
        "dir-name": directory.dir_name,
        "files-present": [_file_to_json(file) for file in directory.files_present],
        "files-removed": [_file_to_json(file) for file in directory.files_removed],
        "sub-dirs-present": [_dir_to_json(sub_dir) for sub_dir in directory.sub_dirs_present],
        "sub-dirs-removed": [_dir_to_json(sub_dir) for sub_dir in directory.sub_dirs_removed],
    }


def _dir_from_json(document: dict[str, Any]) -> DirIndex:
    return DirIndex(
        document["dir-name"],
        tuple(_file_from_json(file) for file in document.get("files-present", [])),
        tuple(_file_from_json(file) for file in document.get("files-removed", [])),
        tuple(_dir_from_json(sub_dir) for sub_dir in document.get("sub-dirs-present", [])),
        tuple(_dir_from_json(sub_dir) for sub_dir in document.get("sub-dirs-removed", [])),
    )

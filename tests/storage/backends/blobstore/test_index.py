"""Snapshot indexes are Samza's JSON with dashed keys, read back whole, and say which blobs a
snapshot needs and which it dropped."""

from __future__ import annotations

import orjson
import pytest

from millstream.checkpoint.checkpoint import CheckpointId
from millstream.storage.backends.blobstore.index import (
    DirIndex,
    FileBlob,
    FileIndex,
    FileMetadata,
    SnapshotIndex,
    SnapshotIndexFormatError,
    SnapshotMetadata,
)


def file(name: str, blob: str) -> FileIndex:
    return FileIndex(name, (FileBlob(blob, 0),), FileMetadata(1, 2, 3, "1000", "1000", "rw-r--r--"), 42)


INDEX = SnapshotIndex(
    123,
    SnapshotMetadata(CheckpointId(5, 6), "job", "1", "Partition 0", "counts"),
    DirIndex(
        "",
        (file("a.sst", "b-a"),),
        (file("old.sst", "b-old"),),
        (DirIndex("sub", (file("x", "b-x"),), (file("y", "b-y"),)),),
        (DirIndex("gone", (file("z", "b-z"),)),),
    ),
    "prev-index",
)


def test_index_round_trips_through_json() -> None:
    assert SnapshotIndex.from_bytes(INDEX.to_bytes(), "test") == INDEX


def test_index_uses_samzas_dashed_keys() -> None:
    document = orjson.loads(INDEX.to_bytes())
    assert set(document) >= {"creation-time-millis", "snapshot-metadata", "dir-index", "prev-snapshot-index-blob-id"}
    assert document["snapshot-metadata"]["checkpoint-id"] == "5-6"
    present = document["dir-index"]["files-present"][0]
    assert present["blobs"] == [{"blob-id": "b-a", "offset": 0}] and present["checksum"] == 42
    assert set(present["file-metadata"]) == {
        "creation-time-millis", "last-modified-time-millis", "size", "owner", "group", "permissions",
    }  # fmt: skip
    assert set(document["dir-index"]) >= {"dir-name", "files-removed", "sub-dirs-present", "sub-dirs-removed"}


def test_blobs_present_and_removed_cover_subdirectories() -> None:
    assert sorted(INDEX.dir_index.blobs_present()) == ["b-a", "b-x"]
    assert sorted(INDEX.dir_index.blobs_removed()) == ["b-old", "b-y", "b-z"]


@pytest.mark.parametrize("data", [b"", b"{}", b'{"creation-time-millis": 1}', b"[1]"])
def test_malformed_index_names_where_it_came_from(data: bytes) -> None:
    with pytest.raises(SnapshotIndexFormatError, match="store 'counts' index 'x'"):
        SnapshotIndex.from_bytes(data, "store 'counts' index 'x'")

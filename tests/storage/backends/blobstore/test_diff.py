"""Diffing a store directory against its previous snapshot: what to upload, keep and drop."""

from __future__ import annotations

import os
from pathlib import Path

from millstream.storage.backends.blobstore.diff import (
    LARGE_FILE_BYTES,
    are_same_dir,
    file_checksum,
    file_metadata,
    get_dir_diff,
    same_file,
)
from millstream.storage.backends.blobstore.index import DirIndex, FileBlob, FileIndex


def indexed(path: Path) -> FileIndex:
    return FileIndex(path.name, (FileBlob(f"blob-{path.name}"),), file_metadata(path), file_checksum(path))


def snapshot_of(directory: Path, name: str = "") -> DirIndex:
    files = tuple(indexed(p) for p in sorted(directory.iterdir()) if p.is_file())
    dirs = tuple(snapshot_of(p, p.name) for p in sorted(directory.iterdir()) if p.is_dir())
    return DirIndex(name, files, (), dirs)


SAME = same_file(compare_large_checksums=False, compare_owners=True)


def test_everything_is_added_against_an_empty_snapshot(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"1")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"2")
    diff = get_dir_diff(tmp_path, DirIndex(""), SAME)
    assert sorted(p.name for p in diff.added_files()) == ["a", "b"]
    assert [d.dir_name for d in diff.sub_dirs_added] == ["sub"]


def test_unchanged_files_are_retained_changed_ones_removed_and_added(tmp_path: Path) -> None:
    for name in "abc":
        (tmp_path / name).write_bytes(name.encode())
    previous = snapshot_of(tmp_path)
    (tmp_path / "b").write_bytes(b"B")  # same size, other content
    (tmp_path / "c").unlink()
    (tmp_path / "d").write_bytes(b"d")
    diff = get_dir_diff(tmp_path, previous, SAME)
    assert [f.file_name for f in diff.files_retained] == ["a"]
    assert sorted(p.name for p in diff.files_added) == ["b", "d"]
    assert sorted(f.file_name for f in diff.files_removed) == ["b", "c"]


def test_local_checkpoint_files_are_never_part_of_a_snapshot(tmp_path: Path) -> None:
    for name in ("OFFSET", "OFFSET-v2", "CHECKPOINT-V2", "data"):
        (tmp_path / name).write_bytes(b"x")
    assert [p.name for p in get_dir_diff(tmp_path, DirIndex(""), SAME).added_files()] == ["data"]


def test_large_files_are_compared_by_size_unless_checksums_are_asked_for(tmp_path: Path) -> None:
    big = tmp_path / "000001.sst"
    big.write_bytes(b"a" * (LARGE_FILE_BYTES + 1))
    entry = indexed(big)
    big.write_bytes(b"b" * (LARGE_FILE_BYTES + 1))
    assert SAME(big, entry)
    assert not same_file(compare_large_checksums=True, compare_owners=True)(big, entry)


def test_permission_changes_make_a_file_different(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    entry = indexed(path)
    os.chmod(path, 0o444)
    assert not SAME(path, entry)


def test_removed_and_added_subdirectories(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "f").write_bytes(b"1")
    previous = snapshot_of(tmp_path)
    (tmp_path / "old" / "f").unlink()
    (tmp_path / "old").rmdir()
    (tmp_path / "new").mkdir()
    diff = get_dir_diff(tmp_path, previous, SAME)
    assert [d.dir_name for d in diff.sub_dirs_removed] == ["old"]
    assert [d.dir_name for d in diff.sub_dirs_added] == ["new"]


def test_same_dir_explains_the_first_difference(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"1")
    snapshot = snapshot_of(tmp_path)
    assert are_same_dir(tmp_path, snapshot, SAME) == (True, "")
    (tmp_path / "extra").write_bytes(b"2")
    same, reason = are_same_dir(tmp_path, snapshot, SAME)
    assert not same and "unexpected files ['extra']" in reason

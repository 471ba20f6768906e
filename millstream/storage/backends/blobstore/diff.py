"""What changed in a store directory since its last snapshot (Samza's ``DirDiffUtil``), and whether a
local directory is the snapshot an index describes.

A file is the same as an indexed one when its name, size, owner permission bits (and, optionally, its
owner and group) match, and its CRC32 matches — checked only up to 1 MiB unless asked: RocksDB never
rewrites an SST file under the same name, so for the large files a name and a size are enough while
diffing. A restore compares every checksum. Timestamps are ignored: hard links and copies change
them. A changed file counts as removed (its old blob) and added (a new blob).
"""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from millstream.storage.backends.blobstore.index import DirIndex, FileIndex, FileMetadata
from millstream.storage.layout import LOCAL_CHECKPOINT_FILES

LARGE_FILE_BYTES = 1 << 20
CHUNK = 1 << 20

SameFile = Callable[[Path, FileIndex], bool]


@dataclass
class DirDiff:
    dir_name: str
    files_added: list[Path] = field(default_factory=list)
    files_retained: list[FileIndex] = field(default_factory=list)
    files_removed: list[FileIndex] = field(default_factory=list)
    sub_dirs_added: list[DirDiff] = field(default_factory=list)
    sub_dirs_retained: list[DirDiff] = field(default_factory=list)
    sub_dirs_removed: list[DirIndex] = field(default_factory=list)

    def added_files(self) -> list[Path]:
        """Every file to upload, recursively."""
        files = list(self.files_added)
        for sub_dir in (*self.sub_dirs_added, *self.sub_dirs_retained):
            files.extend(sub_dir.added_files())
        return files


def file_checksum(path: Path) -> int:
    crc = 0
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def permissions(mode: int) -> str:
    """``rw-r--r--`` for 0o644, as Java's ``PosixFilePermissions.toString``."""
    return stat.filemode(mode)[1:]


def file_metadata(path: Path) -> FileMetadata:
    info = path.stat()
    return FileMetadata(
        int(info.st_ctime * 1000),
        int(info.st_mtime * 1000),
        info.st_size,
        str(info.st_uid),
        str(info.st_gid),
        permissions(info.st_mode),
    )


def same_file(compare_large_checksums: bool, compare_owners: bool) -> SameFile:
    def check(local: Path, remote: FileIndex) -> bool:
        if local.name != remote.file_name:
            return False
        info = local.stat()
        metadata = remote.metadata
        if info.st_size != metadata.size:
            return False
        if permissions(info.st_mode)[:3] != metadata.permissions[:3]:
            return False
        if compare_owners and (str(info.st_uid), str(info.st_gid)) != (metadata.owner, metadata.group):
            return False
        if info.st_size <= LARGE_FILE_BYTES or compare_large_checksums:
            return file_checksum(local) == remote.checksum
        return True

    return check


def _entries(directory: Path, ignore: frozenset[str]) -> tuple[dict[str, Path], dict[str, Path]]:
    files: dict[str, Path] = {}
    dirs: dict[str, Path] = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name in ignore:
                continue
            if entry.is_dir(follow_symlinks=False):
                dirs[entry.name] = Path(entry.path)
            else:
                files[entry.name] = Path(entry.path)
    return files, dirs


def get_dir_diff(
    local: Path, remote: DirIndex, same: SameFile, ignore: frozenset[str] = LOCAL_CHECKPOINT_FILES
) -> DirDiff:
    """Compare ``local`` with the previous snapshot's ``remote`` index (``DirIndex("")`` when none)."""
    diff = DirDiff(remote.dir_name if remote.dir_name else "")
    files, dirs = _entries(local, ignore)
    remote_files = {file.file_name: file for file in remote.files_present}
    for name, path in sorted(files.items()):
        previous = remote_files.get(name)
        if previous is not None and same(path, previous):
            diff.files_retained.append(previous)
        else:
            diff.files_added.append(path)
            if previous is not None:
                diff.files_removed.append(previous)
    diff.files_removed.extend(file for name, file in sorted(remote_files.items()) if name not in files)
    remote_dirs = {sub_dir.dir_name: sub_dir for sub_dir in remote.sub_dirs_present}
    for name, path in sorted(dirs.items()):
        previous_dir = remote_dirs.get(name)
        if previous_dir is None:
            diff.sub_dirs_added.append(get_dir_diff(path, DirIndex(name), same, frozenset()))
        else:
            diff.sub_dirs_retained.append(get_dir_diff(path, previous_dir, same, frozenset()))
    diff.sub_dirs_removed.extend(sub_dir for name, sub_dir in sorted(remote_dirs.items()) if name not in dirs)
    return diff


def are_same_dir(
    local: Path, remote: DirIndex, same: SameFile, ignore: frozenset[str] = LOCAL_CHECKPOINT_FILES
) -> tuple[bool, str]:
    """Whether ``local`` holds exactly the files ``remote`` lists (and nothing else); else why not."""
    if not local.is_dir():
        return False, f"'{local}' is not a directory"
    files, dirs = _entries(local, ignore)
    remote_files = {file.file_name: file for file in remote.files_present}
    if files.keys() != remote_files.keys():
        missing = sorted(remote_files.keys() - files.keys())
        extra = sorted(files.keys() - remote_files.keys())
        return False, f"'{local}': missing files {missing}, unexpected files {extra}"
    for name, path in sorted(files.items()):
        if not same(path, remote_files[name]):
            return False, f"file '{path}' differs from the snapshot (size, permissions, owner or checksum)"
    remote_dirs = {sub_dir.dir_name: sub_dir for sub_dir in remote.sub_dirs_present}
    if dirs.keys() != remote_dirs.keys():
        return False, f"'{local}': subdirectories {sorted(dirs)} differ from the snapshot's {sorted(remote_dirs)}"
    for name, path in sorted(dirs.items()):
        same_dir, reason = are_same_dir(path, remote_dirs[name], same, frozenset())
        if not same_dir:
            return False, reason
    return True, ""

"""The segment files of a log partition: its batches' payloads, written once, beside the SQLite file that
indexes them.

A partition's payloads are appended to its current segment, ``p<N>-<first offset, 20 digits>.seg`` beside
``p<N>.db``. An append that would take the segment past ``SEGMENT_BYTES`` starts a new one named by its
own first offset, so names sort in offset order and are never reused (offsets are not). Each batch's
index row names its segment, position, length and CRC-32, and is committed only after the payload is
written (and synced, with ``fsync``): a committed row always points at a written payload. Bytes an append
wrote but never committed lie past the segment's committed end and are overwritten by the next append.

Why not in SQLite: a payload of 100 KB spans 25 overflow pages, each written to the WAL and copied into
the file again by a checkpoint, with the GIL given up and won back around every statement. Written here
it costs one ``pwrite``, and the WAL holds only the small index rows.

Reads check each payload's length and checksum, so a segment cut short or overwritten (a full disk, a
bad copy, a crash of the machine before the page cache reached the disk without ``fsync``) fails the read
naming the file instead of returning other records.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from pathlib import Path

from millstream.files import sync_dir

SEGMENT_BYTES = 64 << 20
"""Payload bytes after which an append starts a new segment: the unit retention deletes."""
_MAX_OPEN_FOR_READS = 4
"""Segments one partition keeps open for reads (a reader going back opens earlier ones again)."""

checksum = zlib.crc32
"""The CRC-32 an index row holds for its payload."""


class DamagedSegmentError(Exception):
    """A payload that is not what its index row says: cut short, or its bytes changed."""


class Segments:
    """Write and read one partition's segment files; one thread at a time, like the partition's connection."""

    __slots__ = ("_directory", "_fsync", "_prefix", "_reading", "_writing")

    def __init__(self, partition_path: Path, *, fsync: bool) -> None:
        self._directory = partition_path.parent
        self._prefix = f"{partition_path.stem}-"
        self._fsync = fsync
        self._writing: tuple[int, int] | None = None
        """The segment appended to last and its descriptor."""
        self._reading: dict[int, int] = {}
        """Descriptors of segments read from, by segment."""

    def path(self, segment: int) -> Path:
        return self._directory / f"{self._prefix}{segment:020d}.seg"

    def write(self, segment: int, position: int, payloads: Sequence[bytes]) -> None:
        """Write ``payloads`` one after another from ``position`` of ``segment`` (created if need be)."""
        descriptor = self._writer(segment)
        for payload in payloads:
            view = memoryview(payload)
            while view:
                written = os.pwrite(descriptor, view, position)
                view = view[written:]
                position += written
        if self._fsync:
            os.fdatasync(descriptor)

    def read(self, segment: int, position: int, length: int, crc: int) -> bytes:
        """The payload at ``position`` of ``segment``, checked against ``length`` and ``crc``.

        Raises ``FileNotFoundError`` when the segment is gone (retention deleted it meanwhile) and
        ``DamagedSegmentError`` when the bytes are not the payload's.
        """
        descriptor = self._reading.get(segment)
        if descriptor is None:
            descriptor = self._reader(segment)
        payload = os.pread(descriptor, length, position)
        if len(payload) != length:
            raise DamagedSegmentError(
                f"segment file '{self.path(segment)}' holds {len(payload)} of the {length} bytes at {position}"
            )
        if checksum(payload) != crc:
            raise DamagedSegmentError(
                f"the {length} bytes at {position} of segment file '{self.path(segment)}' fail their checksum"
            )
        return payload

    def remove_below(self, segment: int) -> None:
        """Delete the segment files before ``segment`` (retention trimmed every batch they hold)."""
        for descriptor in [self._reading.pop(old) for old in list(self._reading) if old < segment]:
            os.close(descriptor)
        for entry in self._directory.glob(f"{self._prefix}*.seg"):
            name = entry.name[len(self._prefix) : -len(".seg")]
            if name.isdigit() and int(name) < segment:
                entry.unlink(missing_ok=True)

    def close(self) -> None:
        if self._writing is not None:
            os.close(self._writing[1])
            self._writing = None
        for descriptor in self._reading.values():
            os.close(descriptor)
        self._reading.clear()

    def _writer(self, segment: int) -> int:
        if self._writing is not None:
            if self._writing[0] == segment:
                return self._writing[1]
            os.close(self._writing[1])
            self._writing = None
        path = self.path(segment)
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:  # an earlier append started it
            descriptor = os.open(path, os.O_WRONLY)
        else:
            if self._fsync:  # the new file's name must survive power loss as its bytes will
                sync_dir(self._directory)
        self._writing = (segment, descriptor)
        return descriptor

    def _reader(self, segment: int) -> int:
        """Open ``segment`` for reads. A reader moves forward through the segments, so the ones before it are
        closed: retention deletes them, and their disk space is freed only once no descriptor holds them."""
        stale = [other for other in self._reading if other < segment]
        if len(self._reading) - len(stale) >= _MAX_OPEN_FOR_READS:  # going back again and again
            stale = list(self._reading)
        for other in stale:
            os.close(self._reading.pop(other))
        descriptor = self._reading[segment] = os.open(self.path(segment), os.O_RDONLY)
        return descriptor

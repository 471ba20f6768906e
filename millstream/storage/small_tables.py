"""Which of a RocksDB store's small table files to merge, so that their number does not grow with time.

Every flush of a memtable writes a table file as large as what the memtable held. When that file's keys do not
overlap the files below it (keys that ascend, such as times or sequence numbers, or any store whose writes between
flushes land in a key range of their own), RocksDB's compaction moves it down the levels as it is, without
rewriting it: it is never merged with its neighbours. A store that flushes a few keys at every commit or local
checkpoint then gains one tiny file per flush, for good, and RocksDB holds every table file open: a container of
1,000 such stores, each flushed every round, ran out of its 20,000 descriptors within seven rounds (``Too many open
files`` at the next snapshot), and each local checkpoint hard-links every file, so it grew slower the longer the
job ran. Merging the small ones once there are more than ``SMALL_TABLES_MAX`` bounds the number of files by the
data the store holds, not by the flushes it made.

A store whose files are all small (most stores of a container of many tasks) is compacted whole, level 0
included, into one file: at most a few tens of MB rewritten. In a larger store only runs of adjacent small files on
its bottom level are merged, where RocksDB's moves leave them (a level's files do not overlap, so the key range of a
run holds those files and nothing else of that level), each run's range on its own: a merge rewrites the run's
bytes and whatever of the levels above overlaps its range, never the bottom level's large files. Sans-IO: it reads
the files' descriptions (``Rdict.live_files``) and returns key ranges.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SMALL_TABLE_BYTES = 4 << 20
"""A table file under this size is small: a sixteenth of RocksDB's default target file size (64 MB), which its own
compactions write."""

SMALL_TABLES_MAX = 4
"""Small files a store may hold before the next flush merges them. RocksDB also holds a store's log, manifest,
write-ahead log and lock open, so a store of small files holds at most about ten descriptors: a container of 1,000
stores and their changelog and input partitions on the embedded log about 15,000."""

TableFile = Mapping[str, Any]
"""One file as ``Rdict.live_files`` describes it: ``level``, ``size``, ``start_key``, ``end_key`` among others."""

KeyRange = tuple[bytes, bytes]
"""Both ends inclusive, as ``Rdict.compact_range`` takes them."""


def ranges_to_merge(files: Sequence[TableFile]) -> list[KeyRange]:
    """None while the store holds at most ``SMALL_TABLES_MAX`` small files. Past that, the key range of all of it
    when every file is small, else of every run of two or more adjacent small files on its bottom level."""
    small = [file for file in files if file["size"] < SMALL_TABLE_BYTES]
    if len(small) <= SMALL_TABLES_MAX:
        return []
    if len(small) == len(files):
        return [(min(file["start_key"] for file in files), max(file["end_key"] for file in files))]
    bottom = max(file["level"] for file in files)
    ranges: list[KeyRange] = []
    run: list[TableFile] = []
    for file in sorted((file for file in files if file["level"] == bottom), key=lambda file: file["start_key"]):
        if file["size"] < SMALL_TABLE_BYTES:
            run.append(file)
            continue
        ranges.extend(_range_of(run))
        run = []
    return ranges + _range_of(run)


def _range_of(run: Sequence[TableFile]) -> list[KeyRange]:
    return [(run[0]["start_key"], run[-1]["end_key"])] if len(run) > 1 else []

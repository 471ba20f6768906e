"""Seeing that a closed partition file changed without opening it: its files' ``os.stat``.

A consumer closes the partitions it holds beyond ``systems.<s>.consumer.open.partitions.max`` (``consumer``);
a closed partition that had nothing to read is watched through its *signature*: the device, inode, size and
modification time (ns) of its SQLite file and of its ``-wal`` (zeros when there is none). Every commit to the
partition writes one of them: in WAL mode a commit writes its frames to the ``-wal`` (creating it if need be)
and a checkpoint writes the file, and either write sets that file's modification time, so a commit after a
signature was taken changes it — unless the write falls in the same tick of the kernel's coarse clock as a
modification already in the signature and leaves the size as it was (a ``-wal`` written again from its start).

That race is closed as Git closes its "racy" index entries: a signature is trusted only when every
modification time in it is older than ``RACY_NS`` before the moment (``taken_ns``) from which changes must be
seen; a *racy* signature is not kept, and the partition is read instead. Any write after ``taken_ns`` gets a
modification time no more than one clock tick (at most 10 ms on Linux) before ``taken_ns``, so it can never
equal a trusted one. This holds on file systems with sub-second timestamps (ext4, XFS, Btrfs, tmpfs, APFS); on
one with coarser timestamps a change may go unseen until the consumer's backstop, a full read of every closed
quiet partition at least every ``CLOSED_RECHECK_MS`` (``consumer``). The wall clock here is the real one, not a
consumer's injected clock: it is compared with the file system's.
"""

from __future__ import annotations

import os

RACY_NS = 100_000_000
"""How much older than the watch's start a signature's modification times must be for it to be trusted: many
times the kernel's clock tick."""

Signature = tuple[int, int, int, int, int, int, int]
"""``(device, inode, size, mtime_ns)`` of the file, then ``(inode, size, mtime_ns)`` of its ``-wal``."""


def signature(path: str) -> Signature | None:
    """The signature of the partition file at ``path`` now; None when the file is gone."""
    try:
        main = os.stat(path)
    except FileNotFoundError:
        return None
    try:
        wal = os.stat(path + "-wal")
    except FileNotFoundError:
        return (main.st_dev, main.st_ino, main.st_size, main.st_mtime_ns, 0, 0, 0)
    return (main.st_dev, main.st_ino, main.st_size, main.st_mtime_ns, wal.st_ino, wal.st_size, wal.st_mtime_ns)


def trusted(path: str, taken_ns: int) -> Signature | None:
    """The signature of ``path`` when it sees every change made from ``taken_ns`` (``time.time_ns()``) on; None
    when it may not (racy, or the file is gone): then the partition must be read to know."""
    current = signature(path)
    if current is None or max(current[3], current[6]) >= taken_ns - RACY_NS:
        return None
    return current

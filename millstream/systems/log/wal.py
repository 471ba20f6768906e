"""Checkpoints of a partition file's write-ahead log, off the thread that appends.

A checkpoint copies the WAL's pages into the partition file and syncs both files: for 32 MiB of WAL
about 90 ms on a local SSD, most of it waiting for the disk. Run by the appending connection itself
(SQLite's automatic checkpoint), that time stalls every append behind it, and a producer whose
partitions fill evenly stalls for all of them at once. So a ``LogPartition`` that has appended
``WAL_CHECKPOINT_BYTES`` hands the checkpoint to this module's thread, which runs it on a connection
of its own while appends go on (SQLite lets a passive checkpoint and a writer share the file).

Such a checkpoint copies what the WAL held when it began; the appends made meanwhile are still only in
the WAL, and SQLite rewinds the WAL to its start only once everything in it is copied. The appender
therefore finishes the job itself after the background checkpoint is done (``finish_checkpoint``): a
passive checkpoint of its own, which copies only that short tail, after which its next append starts
the WAL over. The automatic checkpoint stays on as a backstop at ``WAL_BACKSTOP_BYTES``, should the
background thread fall behind.

Checkpoints never decide what survives a crash (a committed append is in the WAL either way, and
SQLite replays the WAL when it opens the file), so a checkpoint that fails is logged and left to the
next one.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger(__name__)

WAL_CHECKPOINT_BYTES = 1 << 25
"""WAL an appender writes before it asks for a background checkpoint. Bigger means fewer checkpoints
(each syncs both files) for more WAL on disk beside each busy partition."""
WAL_BACKSTOP_BYTES = WAL_CHECKPOINT_BYTES * 2
"""WAL at which the appending connection checkpoints by itself (SQLite's automatic checkpoint): reached
only when background checkpoints fall behind; also the size a longer WAL file is cut back to."""

_executor: ThreadPoolExecutor | None = None
_starting = threading.Lock()


def checkpoint_in_background(path: Path, fsync: bool) -> Future[None]:
    """Start a passive checkpoint of ``path``'s WAL on this process's checkpoint thread."""
    global _executor
    with _starting:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-wal-checkpoint")
        executor = _executor
    return executor.submit(_checkpoint, path, fsync)


def finish_checkpoint(connection: sqlite3.Connection, started: Future[None], where: object) -> None:
    """After ``started`` is done: the appending ``connection`` copies what was appended meanwhile, so
    that its next append rewinds the WAL. A failure (of either) is logged, not raised."""
    error = started.exception()
    if error is not None:
        log.warning("%s: a background WAL checkpoint failed (the next one will copy it): %s", where, error)
    try:
        connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    except sqlite3.Error as failure:
        log.warning("%s: a WAL checkpoint failed (the next one will copy it): %s", where, failure)


def _checkpoint(path: Path, fsync: bool) -> None:
    # mode=rw: a file deleted meanwhile (its stream cleared) fails to open instead of being created empty
    connection = sqlite3.connect(f"{path.as_uri()}?mode=rw", uri=True, isolation_level=None, timeout=1)
    try:
        connection.execute(f"PRAGMA synchronous = {'FULL' if fsync else 'NORMAL'}")
        connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    finally:
        connection.close()


def _forget_in_child() -> None:
    """A forked process (a Spark Python worker) has the parent's executor but not its thread: it starts its own."""
    global _executor, _starting
    _executor = None
    _starting = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)

"""One partition of a log stream on disk: a SQLite file in WAL mode.

Offsets are 0-based and dense. The writer assigns them inside a ``BEGIN IMMEDIATE`` transaction
from the ``next_offset`` of the meta row, and commits the records and the new ``next_offset``
together, so any number of processes may append to the same file without lost writes or duplicate
offsets, and a reader never sees a gap: every offset in ``[oldest, upcoming)`` is present. Trimming
only moves ``oldest`` forward; ``next_offset`` never goes back, so offsets are never reused.

WAL lets readers proceed while a writer holds the lock; a writer waits for the lock up to
``busy_timeout`` (30 s). With ``synchronous=NORMAL`` (the default) a committed append survives a
crash of the process; with ``synchronous=FULL`` (``systems.<s>.fsync=true``) it also survives
power loss.

A ``LogPartition`` holds one connection and is meant for one thread at a time; open one per
process (connections must not cross ``fork``).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from millstream.systems.log.errors import LogStorageError, PartitionSealedError

BUSY_TIMEOUT_MS = 30_000
TRIM_CHUNK = 100_000
"""Most records one trim transaction deletes."""
PAGE_SIZE = 4096
"""SQLite's default. 16 KiB pages read about 10% faster but halve the rate of small commits."""
MMAP_SIZE = 1 << 28
"""Bytes of the file mapped into memory for reads: page reads without a copy through the page cache."""

_SCHEMA = """
CREATE TABLE records (
    "offset" INTEGER PRIMARY KEY,
    timestamp INTEGER NOT NULL,
    key BLOB,
    value BLOB,
    headers BLOB
);
CREATE TABLE meta (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    next_offset INTEGER NOT NULL,
    oldest_offset INTEGER NOT NULL,
    sealed INTEGER NOT NULL
);
INSERT INTO meta (id, next_offset, oldest_offset, sealed) VALUES (0, 0, 0, 0);
"""

# Columns in the order of IncomingMessageEnvelope's parameters after ``ssp`` and ``offset``. The
# offset itself is not selected: offsets are dense, so the rows are ``start, start + 1, ...`` as long
# as ``start`` is retained, which the guard on ``oldest_offset`` checks in the same snapshot. Each
# selected column costs about as much as building the envelope, so sizes are left to ``len``.
_READ = (
    "SELECT key, value, timestamp, headers FROM records "
    'WHERE "offset" >= ?1 AND ?1 >= (SELECT oldest_offset FROM meta WHERE id = 0) '
    'ORDER BY "offset" LIMIT ?2'
)
_INSERT = 'INSERT INTO records ("offset", timestamp, key, value, headers) VALUES (?, ?, ?, ?, ?)'
_META = "SELECT oldest_offset, next_offset, sealed FROM meta WHERE id = 0"

Record = tuple[int, Any, Any, Any]
"""``(timestamp_ms, key, value, headers)`` as stored: bytes or None, headers already msgpack-encoded."""

Row = tuple[Any, Any, int, Any]
"""``(key, value, timestamp, headers_msgpack)`` as read."""


class PartitionState(NamedTuple):
    """The meta row: ``oldest`` equals ``upcoming`` when the partition holds nothing."""

    oldest: int
    upcoming: int
    sealed: bool


class LogPartition:
    """Append, read, trim and seal one partition file; see the module docstring for guarantees."""

    __slots__ = ("_connection", "_identity", "partition", "path", "stream")

    def __init__(self, path: Path, stream: str, partition: int, *, fsync: bool = False, create: bool = False) -> None:
        """Open the partition file; with ``create`` make a new one (which must not exist yet)."""
        self.path = path
        self.stream = stream
        self.partition = partition
        mode = "rwc" if create else "rw"
        if create and path.exists():
            raise self._error(f"cannot create the partition file: '{path}' already exists")
        try:
            connection = sqlite3.connect(
                f"{path.as_uri()}?mode={mode}",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                timeout=BUSY_TIMEOUT_MS / 1000,
            )
        except sqlite3.Error as error:
            raise self._error(f"cannot open the partition file: {error}") from None
        self._connection = connection
        try:
            connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._identity = _identity(path)
            if create:
                connection.execute(f"PRAGMA page_size = {PAGE_SIZE}")
                connection.execute("PRAGMA journal_mode = WAL")
                connection.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} COMMIT;")
            connection.execute(f"PRAGMA synchronous = {'FULL' if fsync else 'NORMAL'}")
            connection.execute(f"PRAGMA mmap_size = {MMAP_SIZE}")
            self._state()
        except sqlite3.Error as error:
            connection.close()
            raise self._error(f"not a usable log partition file: {error}") from None
        except OSError as error:
            connection.close()
            raise self._error(f"cannot open the partition file: {error}") from None
        except LogStorageError:
            connection.close()
            raise

    def __repr__(self) -> str:
        return f"LogPartition({self.stream!r}, {self.partition}, {str(self.path)!r})"

    def close(self) -> None:
        self._connection.close()

    def _error(self, detail: str) -> LogStorageError:
        return LogStorageError(self.stream, self.partition, self.path, detail)

    def _check_file(self) -> None:
        """Refuse to go on with a file that was deleted or replaced (its stream cleared or re-created).

        The open connection would still reach the old file: appends would vanish with it and
        reads would never see the new stream's records.
        """
        try:
            current = _identity(self.path)
        except FileNotFoundError:
            current = None
        if current != self._identity:
            raise self._error("the partition file was deleted or replaced since it was opened")

    def _state(self) -> PartitionState:
        row = self._connection.execute(_META).fetchone()
        if row is None:
            raise self._error("the meta row is missing")
        return PartitionState(row[0], row[1], bool(row[2]))

    def state(self) -> PartitionState:
        """Oldest and upcoming offsets and the sealed flag, read consistently in one statement."""
        self._check_file()
        try:
            return self._state()
        except sqlite3.Error as error:
            raise self._error(f"cannot read the partition's metadata: {error}") from None

    def append(self, records: Sequence[Record]) -> int:
        """Append ``records`` in one transaction; return the offset of the first (the others follow).

        All or nothing: on any error nothing is appended. Raises ``PartitionSealedError`` when the
        partition is sealed.
        """
        if not records:
            return self.state().upcoming
        self._check_file()
        connection = self._connection
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                _, first, sealed = connection.execute(_META).fetchone()
                if sealed:
                    raise PartitionSealedError(self.stream, self.partition, self.path)
                connection.executemany(_INSERT, [(first + index, *record) for index, record in enumerate(records)])
                connection.execute("UPDATE meta SET next_offset = ? WHERE id = 0", (first + len(records),))
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as error:
            raise self._error(f"cannot append {len(records)} records: {error}") from None
        return int(first)

    def read(self, start: int, limit: int) -> list[Row]:
        """Up to ``limit`` records at offsets ``start, start + 1, ...`` in one statement.

        Empty when ``start`` is not retained: at or past the end, or below ``oldest`` (trimmed);
        ``state`` tells which.
        """
        try:
            return self._connection.execute(_READ, (start, limit)).fetchall()
        except sqlite3.Error as error:
            raise self._error(f"cannot read from offset {start}: {error}") from None

    def trim(self, before: int) -> int:
        """Delete the records below offset ``before``; return the oldest offset afterwards.

        ``oldest`` only moves forward and never past ``upcoming``: trimming beyond the end empties
        the partition, and the next append still gets the next unused offset. Large trims run in
        several transactions of ``TRIM_CHUNK`` records so appenders wait for the lock only briefly.
        """
        self._check_file()
        connection = self._connection
        try:
            while True:
                connection.execute("BEGIN IMMEDIATE")
                try:
                    oldest, upcoming, _ = connection.execute(_META).fetchone()
                    target = min(max(before, oldest), upcoming, oldest + TRIM_CHUNK)
                    if target > oldest:
                        connection.execute('DELETE FROM records WHERE "offset" < ?', (target,))
                        connection.execute("UPDATE meta SET oldest_offset = ? WHERE id = 0", (target,))
                    connection.execute("COMMIT")
                except BaseException:
                    if connection.in_transaction:
                        connection.execute("ROLLBACK")
                    raise
                if target == oldest or target >= min(before, upcoming):
                    return int(target)
        except sqlite3.Error as error:
            raise self._error(f"cannot trim before offset {before}: {error}") from None

    def seal(self) -> None:
        """Mark the partition bounded and complete: appends fail, consumers see end-of-stream."""
        try:
            self._connection.execute("UPDATE meta SET sealed = 1 WHERE id = 0")
        except sqlite3.Error as error:
            raise self._error(f"cannot seal the partition: {error}") from None

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """The first retained offset whose timestamp is at or after ``timestamp_ms``; upcoming if none.

        A full scan in offset order (timestamps need not be monotonic, and an index would slow
        every append); it stops at the first match.
        """
        connection = self._connection
        try:
            connection.execute("BEGIN")
            try:
                row = connection.execute(
                    'SELECT "offset" FROM records WHERE timestamp >= ? ORDER BY "offset" LIMIT 1', (timestamp_ms,)
                ).fetchone()
                upcoming = self._state().upcoming
            finally:
                connection.execute("COMMIT")
        except sqlite3.Error as error:
            raise self._error(f"cannot search for timestamp {timestamp_ms}: {error}") from None
        return int(row[0]) if row is not None else upcoming


def _identity(path: Path) -> tuple[int, int]:
    status = os.stat(path)
    return (status.st_dev, status.st_ino)

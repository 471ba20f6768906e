"""One partition of a log stream on disk: a SQLite file in WAL mode indexing record batches, whose
payloads lie in segment files beside it (see ``segments``).

Each append stores its records as one batch (Kafka's record batch; several only when they pack to more
than ``MAX_BATCH_BYTES``): the records are msgpack-packed column by column into a payload written to the
partition's current segment, and one row of ``batches`` indexes it, keyed by the batch's exclusive
``end_offset``, so the batch holding offset ``o`` is the first row with ``end_offset > o`` — one seek of
the table's b-tree. One batch instead of one row per record is what makes the log fast in Python: a row
costs about a microsecond to hand over from SQLite (and several to insert) whatever its size, while
msgpack packs or unpacks a record's columns in well under a tenth of that. A payload is written once, to
its segment; the row is committed after it, so a committed row always finds its payload.

Offsets are 0-based and dense. The writer assigns them inside a ``BEGIN IMMEDIATE`` transaction
from the ``next_offset`` of the meta row, and commits the batch and the new ``next_offset``
together, so any number of processes may append to the same file without lost writes or duplicate
offsets, and batches tile ``[0, next_offset)`` without gaps or overlaps (but for the batches of an aborted
transaction, below). Trimming moves
``oldest_offset`` forward and deletes the batches that lie wholly below it; a batch it cuts through
stays on disk, its records below ``oldest`` hidden from every read. ``next_offset`` never goes back,
so offsets are never reused. Every offset in ``[oldest, upcoming)`` is readable.

Exactly-once (see ``transactions``): an append may belong to an open transaction of the log, and then
its batches are also rows of ``pending``. Readers see a partition only up to its *stable end*, the first
offset of a pending batch (Kafka's last stable offset), so neither that transaction's records nor any
appended after them; ``resolve`` publishes the transaction's batches (deletes their ``pending`` rows) or
discards them (deletes their ``batches`` rows too, leaving a gap of offsets that readers step over, as
Kafka's readers step over aborted records). An at-least-once log has no pending row: it pays one seek of
an empty table per read.

WAL lets readers proceed while a writer holds the lock; a writer waits for the lock up to
``busy_timeout`` (30 s). With ``synchronous=NORMAL`` (the default) a committed append survives a
crash of the process; with ``synchronous=FULL`` (``systems.<s>.fsync=true``, which also syncs each
payload before its row commits) it also survives power loss. Without it, a crash of the machine may
lose payloads whose rows survive: reading them then fails on their checksum, naming the segment file.
The WAL holds only index rows, so SQLite's own automatic checkpoint (every 1,000 pages) copies a few
distinct pages into the file each time and keeps the WAL at about 4 MiB.

A ``LogPartition`` holds one connection and is meant for one thread at a time; open one per
process (connections must not cross ``fork``).

The file format (``PRAGMA user_version`` = ``FORMAT_VERSION``; ``PRAGMA application_id`` is the file's incarnation,
random at its creation, which tells a re-created file from a deleted one at the same inode number)::

    batches(end_offset INTEGER PRIMARY KEY,  -- exclusive: base_offset + count
            base_offset, count, min_ts, max_ts,
            segment, position, length, crc)  -- where the payload lies, and its CRC-32
    meta(id = 0, next_offset, oldest_offset, sealed,
         segment, segment_end)               -- the segment appended to, and its committed length
    writers(job, container, generation, epoch)  -- optional: the newest writer token per container
    pending(end_offset, base_offset, txn)    -- the batches of transactions still open (exactly-once)

``writers`` exists once a container's producer wrote or claimed the partition (older files have none,
which reads as no writer yet). An append by a writer checks it in the append's own transaction and is
refused when the job has a newer generation there or the container a newer attempt: a superseded attempt
(a zombie) can never add records behind the offsets its successor's checkpoints name.

A payload is a msgpack array of four columns, one entry per record in offset order:
``timestamps`` (ints, ms), ``keys`` (bin or nil; the whole column nil when no record has a key),
``values`` (bin or nil) and ``headers`` (maps of str to bin, or nil; the whole column nil when no
record has headers). Columns rather than one array per record: they unpack in about half the time
(no per-record arrays to build and take apart) and feed the consumer's column-wise envelope
construction as they are. A read unpacks whole batches and slices off what lies before its start
(or before ``oldest``) and beyond its limit. Trimming deletes the segments whose batches are all gone.
"""

from __future__ import annotations

import logging
import os
import secrets
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgpack

from millstream.contracts.systems import WriterFencedError, WriterToken, all_none
from millstream.embedded.log.errors import LogStorageError, PartitionSealedError
from millstream.embedded.log.segments import SEGMENT_BYTES, DamagedSegmentError, Segments, checksum
from millstream.files import sync_dir

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000
TRIM_CHUNK = 100_000
"""Most records one trim transaction removes (deleting the batches they fill)."""
PAGE_SIZE = 4096
"""SQLite's default: the file holds only the small index rows."""
MMAP_SIZE = 1 << 28
"""Bytes of the file mapped into memory for reads: page reads without a copy through the page cache."""
MAX_BATCH_BYTES = 1 << 22
"""Largest payload of one stored batch: a bigger append is stored as several batches (in the same
transaction), so that a read that starts or ends inside a batch unpacks at most a few MiB it does
not return."""
FORMAT_VERSION = 4
"""``PRAGMA user_version`` of a partition file in this format (1 was one row per record, 2 held the
payloads in the file, 3 had no ``pending`` table: opening one for writing adds it)."""
_PENDING = (
    "CREATE TABLE IF NOT EXISTS pending (end_offset INTEGER PRIMARY KEY, base_offset INTEGER NOT NULL, "
    "txn INTEGER NOT NULL)"
)

_HEADER = "SELECT user_version, application_id FROM pragma_user_version, pragma_application_id"
"""The file's format version and its incarnation (``LogPartition.identity``), both from the database header."""
_INCARNATION_BYTES = slice(68, 72)
"""Where the header keeps ``PRAGMA application_id``: a big-endian 32-bit integer, covered by no checksum."""
_MAX_INCARNATION = (1 << 31) - 1

_SCHEMA = f"""
PRAGMA user_version = {FORMAT_VERSION};
CREATE TABLE batches (
    end_offset INTEGER PRIMARY KEY,
    base_offset INTEGER NOT NULL,
    count INTEGER NOT NULL,
    min_ts INTEGER NOT NULL,
    max_ts INTEGER NOT NULL,
    segment INTEGER NOT NULL,
    position INTEGER NOT NULL,
    length INTEGER NOT NULL,
    crc INTEGER NOT NULL
);
CREATE TABLE meta (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    next_offset INTEGER NOT NULL,
    oldest_offset INTEGER NOT NULL,
    sealed INTEGER NOT NULL,
    segment INTEGER NOT NULL,
    segment_end INTEGER NOT NULL
);
INSERT INTO meta (id, next_offset, oldest_offset, sealed, segment, segment_end) VALUES (0, 0, 0, 0, 0, 0);
{_PENDING};
"""

# The batches overlapping [?1, ?1 + ?2): from the one holding ?1 up to and including the first one
# that reaches ?1 + ?2 (all of them when none does yet). Both ends are seeks on the rowid, so the
# cost does not grow with the log. The guard on oldest_offset runs in the same snapshot: a start
# below it (trimmed, possibly by another process meanwhile) reads nothing rather than later records.
# Nothing at or past the stable end is read: the first batch of a transaction still open (a seek on the
# empty ``pending`` table when there is none, which is all an at-least-once log pays).
_READ = (
    "SELECT base_offset, segment, position, length, crc, end_offset FROM batches "
    "WHERE end_offset > ?1 AND end_offset <= coalesce("
    "(SELECT end_offset FROM batches WHERE end_offset >= ?1 + ?2 ORDER BY end_offset LIMIT 1), ?1 + ?2) "
    "AND end_offset <= coalesce((SELECT base_offset FROM pending ORDER BY end_offset LIMIT 1), end_offset) "
    "AND ?1 >= (SELECT oldest_offset FROM meta WHERE id = 0) "
    "ORDER BY end_offset"
)
_INSERT = (
    "INSERT INTO batches (end_offset, base_offset, count, min_ts, max_ts, segment, position, length, crc) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_META = (
    "SELECT oldest_offset, next_offset, sealed, "
    "coalesce((SELECT base_offset FROM pending ORDER BY end_offset LIMIT 1), next_offset) FROM meta WHERE id = 0"
)
# Where the next record at or after ?1 a reader may see lies, in one snapshot: the first batch ending past ?1,
# or the stable end, whichever is first (the end of the log when neither).
_READABLE_FROM = (
    "SELECT min(coalesce((SELECT base_offset FROM batches WHERE end_offset > ?1 ORDER BY end_offset LIMIT 1), "
    "next_offset), coalesce((SELECT base_offset FROM pending ORDER BY end_offset LIMIT 1), next_offset)) "
    "FROM meta WHERE id = 0"
)
_PEND = "INSERT INTO pending (end_offset, base_offset, txn) VALUES (?, ?, ?)"
_PUBLISH = "DELETE FROM pending WHERE txn = ?"
_DISCARD = "DELETE FROM batches WHERE end_offset IN (SELECT end_offset FROM pending WHERE txn = ?)"
# An append's offsets: moves next_offset past ?1 records and returns it with the segment appended to and its
# committed length, unless the partition is sealed (no row then). One statement instead of reading the meta
# row and updating it: every statement of a transaction gives up the GIL and has to win it back, which costs
# up to a switch interval whenever another thread of the process is busy.
_ADVANCE = (
    "UPDATE meta SET next_offset = next_offset + ?1 WHERE id = 0 AND sealed = 0 "
    "RETURNING next_offset, segment, segment_end"
)
_PLACE = "UPDATE meta SET segment = ?, segment_end = ? WHERE id = 0"
# The same for an appender that knows where the partition ends (?1, where its last append left it, and so
# also which segment it wrote to): one step, no row to fetch, the batch's segment (?3) and that segment's
# new end (?4) recorded with it. It changes nothing when another process appended since, the partition was
# sealed or (the second form) a newer attempt of the writer's container (?7) or a newer generation of its
# job (?5, ?6, ?8) wrote here; the append then takes the general path in the same transaction.
_ADVANCE_EXPECTED = (
    "UPDATE meta SET next_offset = ?1 + ?2, segment = ?3, segment_end = ?4 "
    "WHERE id = 0 AND sealed = 0 AND next_offset = ?1"
)
_ADVANCE_EXPECTED_UNFENCED = (
    f"{_ADVANCE_EXPECTED} AND NOT EXISTS (SELECT 1 FROM writers WHERE job = ?5 "
    "AND (generation > ?6 OR (container = ?7 AND generation = ?6 AND epoch > ?8)))"
)
_WRITERS = (
    "CREATE TABLE IF NOT EXISTS writers (job TEXT NOT NULL, container TEXT NOT NULL, generation INTEGER NOT NULL, "
    "epoch INTEGER NOT NULL, PRIMARY KEY (job, container))"
)
_WRITERS_OF_JOB = "SELECT container, generation, epoch FROM writers WHERE job = ?"
_RECORD_WRITER = "INSERT OR REPLACE INTO writers (job, container, generation, epoch) VALUES (?, ?, ?, ?)"
# Records ?3, ?4 as the container's attempt unless a newer (or the same) one is recorded: retires older attempts.
_RETIRE_WRITER = (
    "INSERT INTO writers (job, container, generation, epoch) VALUES (?1, ?2, ?3, ?4) "
    "ON CONFLICT (job, container) DO UPDATE SET generation = ?3, epoch = ?4 WHERE (generation, epoch) < (?3, ?4)"
)
_BLOCKING = "SELECT txn FROM pending ORDER BY end_offset LIMIT 1"
# Candidates for offset_for_timestamp, in offset order: only batches holding a recent enough record.
_BY_TIMESTAMP = (
    "SELECT base_offset, min_ts, segment, position, length, crc FROM batches "
    "WHERE end_offset > ?1 AND max_ts >= ?2 ORDER BY end_offset"
)
# The first segment a trim keeps: the first remaining batch's, or (none left) the one appended to.
_FIRST_SEGMENT_KEPT = (
    "SELECT coalesce((SELECT segment FROM batches ORDER BY end_offset LIMIT 1), segment) FROM meta WHERE id = 0"
)

Record = tuple[int, Any, Any, Any]
"""``(timestamp_ms, key, value, headers)`` to append: key and value bytes or None, headers a dict
of str to bytes or None (the producer checks them)."""

Row = tuple[Any, Any, int, Any]
"""``(key, value, timestamp, headers)``: one record as ``Records.rows`` gives it."""


@dataclass(frozen=True, slots=True)
class PartitionState:
    """The meta row as readers see it: ``oldest`` equals ``upcoming`` when the partition holds nothing.

    ``upcoming`` is the stable end (Kafka's last stable offset): the first offset of a transaction still
    open, else the end of the log. ``written`` is the end of the log as its writers see it, open
    transactions included (``-1``: not read)."""

    oldest: int
    upcoming: int
    sealed: bool
    written: int = field(default=-1, compare=False)

    @property
    def settled(self) -> bool:
        """No open transaction holds records here: the stable end is the end of the log."""
        return self.upcoming >= self.written


class Records(NamedTuple):
    """Consecutive records from offset ``start``, column by column (``len(values)`` of them).

    ``keys`` may be None instead of a column of Nones when no record has a key, and ``headers``
    when none has headers (a batch that has none stores no such column).
    """

    start: int
    timestamps: list[int]
    keys: list[Any] | None
    values: list[Any]
    headers: list[Any] | None

    def rows(self) -> list[Row]:
        """One ``(key, value, timestamp, headers)`` tuple per record (for tests and tools)."""
        count = len(self.values)
        keys = self.keys if self.keys is not None else [None] * count
        headers = self.headers if self.headers is not None else [None] * count
        return list(zip(keys, self.values, self.timestamps, headers, strict=True))


class LogPartition:
    """Append, read, trim and seal one partition file; see the module docstring for guarantees."""

    __slots__ = (
        "_connection",
        "_identity",
        "_incarnation",
        "_placed",
        "_recorded",
        "_segments",
        "_upcoming",
        "partition",
        "path",
        "stream",
    )

    def __init__(
        self,
        path: Path,
        stream: str,
        partition: int,
        *,
        fsync: bool = False,
        create: bool = False,
        page_cache: bool = True,
    ) -> None:
        """Open the partition file; with ``create`` make a new one (which must not exist yet).

        ``page_cache=False`` (a consumer's partitions, one open file per input partition) keeps no pages of
        the file in SQLite's own cache: reads still come through the memory map, and an idle partition holds
        about half the memory (SQLite allocates a cache's first pages in bulk when the connection first reads)."""
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
        self._recorded: WriterToken | None = None
        """The last writer this connection checked: once set, the ``writers`` table is known to exist."""
        self._upcoming: int | None = None
        """Where this connection's last append left ``next_offset``: the next append expects it there."""
        self._placed = (0, 0)
        """The segment this connection's last append wrote to and where that segment then ended."""
        self._segments = Segments(path, fsync=fsync)
        try:
            self._identity = _identity(path)
            if create:
                connection.execute(f"PRAGMA page_size = {PAGE_SIZE}")
                connection.execute("PRAGMA journal_mode = WAL")
                connection.executescript(
                    f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA application_id = {_new_incarnation()}; COMMIT;"
                )
            connection.executescript(_settings(fsync=fsync, page_cache=page_cache))
            version, self._incarnation = connection.execute(_HEADER).fetchone()
            if version == FORMAT_VERSION - 1:  # the same but for the table of open transactions' batches
                migration = f"BEGIN IMMEDIATE; {_PENDING}; PRAGMA user_version = {FORMAT_VERSION}; COMMIT;"
                connection.executescript(migration)
                version = FORMAT_VERSION
            if version != FORMAT_VERSION:
                raise self._error(
                    f"not a usable log partition file: format version {version}, this version reads {FORMAT_VERSION}"
                )
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
        self._segments.close()

    def _error(self, detail: str) -> LogStorageError:
        return LogStorageError(self.stream, self.partition, self.path, detail)

    def is_current(self) -> bool:
        """Whether the file at ``path`` is still the one this partition opened (not deleted or replaced)."""
        try:
            return _identity(self.path) == self._identity
        except FileNotFoundError:
            return False

    @property
    def identity(self) -> tuple[int, int, int]:
        """The device, inode and incarnation of the file this partition opened: a pool that closes and reopens
        partitions compares it to refuse a file deleted or replaced meanwhile, as ``_check_file`` does for an open
        one. The incarnation (a random number in the file's header, 0 in files made before it) is what tells a
        re-created file from the one first opened once both are closed: a filesystem gives a new file the inode
        number of one just deleted, and on a tmpfs or ext4 it often does."""
        return (*self._identity, self._incarnation)

    def replaced_error(self) -> LogStorageError:
        """The error of an operation on a file deleted or replaced since it was first opened."""
        return self._error("the partition file was deleted or replaced since it was opened")

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
            raise self.replaced_error()

    def _state(self) -> PartitionState:
        row = self._connection.execute(_META).fetchone()
        if row is None:
            raise self._error("the meta row is missing")
        return PartitionState(row[0], min(row[1], row[3]), bool(row[2]), row[1])

    def state(self) -> PartitionState:
        """Oldest and upcoming offsets and the sealed flag, read consistently in one statement."""
        self._check_file()
        try:
            return self._state()
        except sqlite3.Error as error:
            raise self._error(f"cannot read the partition's metadata: {error}") from None

    def version(self) -> int:
        """SQLite's ``data_version`` of this connection: it changes whenever another connection (of this process
        or another) commits a change to the file, and only then. Equal values around a span of time prove the
        file did not change in it, at the cost of one statement that touches no page (about 4 µs)."""
        try:
            return int(self._connection.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error as error:
            raise self._error(f"cannot read the partition's data version: {error}") from None

    def append(self, records: Sequence[Record]) -> int:
        """Append ``records`` as one batch (see ``append_columns``); return the offset of the first.

        All or nothing: on any error nothing is appended. Raises ``PartitionSealedError`` when the
        partition is sealed.
        """
        if not records:
            return self.state().written
        try:
            timestamps, keys, values, headers = zip(*records, strict=True)
        except (TypeError, ValueError) as error:
            raise self._error(f"cannot append {len(records)} records: {error}") from None
        return self.append_columns(timestamps, keys, values, headers)

    def append_columns(
        self,
        timestamps: Sequence[int],
        keys: Sequence[Any] | None,
        values: Sequence[Any],
        headers: Sequence[Any] | None,
        writer: WriterToken | None = None,
        txn: int | None = None,
    ) -> int:
        """``append`` of records given column by column, as the producer buffers them.

        One entry per record in each column; ``keys`` or ``headers`` may be None when every record
        has none. The records become one stored batch, or several (committed together) when they
        pack to more than ``MAX_BATCH_BYTES``. With ``writer``, the append is refused
        (``WriterFencedError``, nothing appended) when a newer attempt or generation wrote or claimed
        the partition; the check and the append are one transaction. With ``txn``, the batches belong to that
        open transaction of the log (see ``transactions``): no reader sees them, nor anything after them,
        until ``resolve`` publishes or discards them.
        """
        count = len(values)
        if not count:
            return self.state().written
        self._check_file()
        try:
            batches = _pack(count, timestamps, keys, values, headers)
        except (TypeError, ValueError, OverflowError) as error:
            raise self._error(f"cannot append {count} records: {error}") from None
        size = sum(len(batch[3]) for batch in batches)
        connection = self._connection
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                placed = self._advance_as_expected(count, size, writer) or self._advance(count, size, writer)
                first, segment, position = placed
                self._write_payloads(segment, position, batches)
                end = first
                for records, lowest, highest, payload in batches:
                    length = len(payload)
                    row = (end + records, end, records, lowest, highest, segment, position, length, checksum(payload))
                    connection.execute(_INSERT, row)
                    if txn is not None:
                        connection.execute(_PEND, (end + records, end, txn))
                    end += records
                    position += length
                connection.execute("COMMIT")
            except BaseException:
                self._upcoming = None
                self._recorded = None  # a rolled-back append may have recorded its writer in vain
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as error:
            raise self._error(f"cannot append {count} records: {error}") from None
        self._upcoming = end
        self._placed = (segment, position)
        return first

    def _write_payloads(self, segment: int, position: int, batches: list[tuple[int, int, int, bytes]]) -> None:
        try:
            self._segments.write(segment, position, [batch[3] for batch in batches])
        except OSError as error:
            raise self._error(f"cannot write segment file '{self._segments.path(segment)}': {error}") from None

    def _advance_as_expected(self, count: int, size: int, writer: WriterToken | None) -> tuple[int, int, int] | None:
        """Inside the append's transaction: move ``next_offset`` past ``count`` records, and the segment's end
        past ``size`` bytes, in one statement when ``next_offset`` is where this connection's last append left
        it and ``writer`` is the one this connection recorded. The first offset, the segment and the position
        to write at, or None (nothing changed) when that does not hold."""
        expected = self._upcoming
        if expected is None:
            return None
        segment, position = _placement(expected, size, *self._placed)
        if writer is None:
            cursor = self._connection.execute(_ADVANCE_EXPECTED, (expected, count, segment, position + size))
        elif writer == self._recorded:
            parameters = (
                expected,
                count,
                segment,
                position + size,
                writer.job,
                writer.generation,
                writer.container_id,
                writer.epoch,
            )
            cursor = self._connection.execute(_ADVANCE_EXPECTED_UNFENCED, parameters)
        else:
            return None
        return (expected, segment, position) if cursor.rowcount == 1 else None

    def _advance(self, count: int, size: int, writer: WriterToken | None) -> tuple[int, int, int]:
        """``_advance_as_expected`` for any state of the file: refuses a sealed partition and a stale
        ``writer`` and records a new one."""
        advanced = self._connection.execute(_ADVANCE, (count,)).fetchone()
        if advanced is None:
            self._state()  # raises when the meta row is missing, which is not a seal
            raise PartitionSealedError(self.stream, self.partition, self.path)
        if writer is not None:
            self._check_writer(writer)
        first = int(advanced[0]) - count
        segment, position = _placement(first, size, int(advanced[1]), int(advanced[2]))
        self._connection.execute(_PLACE, (segment, position + size))
        return first, segment, position

    def claim(self, writer: WriterToken) -> None:
        """Record ``writer`` as the partition's current writer for its container without appending:
        from now on appends of older attempts (and generations) of the job are refused. Raises
        ``WriterFencedError`` when ``writer`` itself is older than what is recorded."""
        self._check_file()
        connection = self._connection
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                self._check_writer(writer)
                connection.execute("COMMIT")
            except BaseException:
                self._recorded = None
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as error:
            raise self._error(f"cannot record {writer.describe()} as its writer: {error}") from None

    def resolve(
        self, txn: int, *, commit: bool, writer: WriterToken | None = None, retire: WriterToken | None = None
    ) -> None:
        """End transaction ``txn`` here: publish its batches (``commit``; readers see them and what follows)
        or discard them (their offsets become a gap readers step over). Idempotent: resolving a transaction
        that holds nothing here changes nothing. With ``writer``, it is recorded as the partition's writer in
        the same step (an abort by a container's next attempt fences the attempt whose batches it discards).
        With ``retire`` (an abort by the transaction's timeout, by anyone), that token is recorded for its
        container unless a newer one is: the timed-out attempt appends nothing here after its batches are gone."""
        self._check_file()
        connection = self._connection
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                if writer is not None:
                    self._check_writer(writer)
                if retire is not None:
                    connection.execute(_WRITERS)
                    connection.execute(
                        _RETIRE_WRITER, (retire.job, retire.container_id, retire.generation, retire.epoch)
                    )
                if not commit:
                    connection.execute(_DISCARD, (txn,))
                connection.execute(_PUBLISH, (txn,))
                connection.execute("COMMIT")
            except BaseException:
                self._recorded = None
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as error:
            verb = "commit" if commit else "abort"
            raise self._error(f"cannot {verb} log transaction {txn}: {error}") from None

    def blocking_transaction(self) -> int | None:
        """The open transaction whose first batch is the stable end, if one is (see ``transactions``)."""
        try:
            row = self._connection.execute(_BLOCKING).fetchone()
        except sqlite3.Error as error:
            raise self._error(f"cannot read the open transactions: {error}") from None
        return None if row is None else int(row[0])

    def _check_writer(self, writer: WriterToken) -> None:
        """Inside a write transaction: refuse a stale ``writer``, record a newer one. One query when the
        token is already recorded (every append of an attempt but its first)."""
        connection = self._connection
        if self._recorded is None:
            connection.execute(_WRITERS)
        newest_generation = writer.generation
        own: tuple[int, int] | None = None
        for container, generation, epoch in connection.execute(_WRITERS_OF_JOB, (writer.job,)).fetchall():
            newest_generation = max(newest_generation, generation)
            if container == writer.container_id:
                own = (generation, epoch)
        if newest_generation > writer.generation:
            raise self._fenced(writer, f"generation {newest_generation} of the job writes here now")
        if own is not None and own > writer.order:
            raise self._fenced(writer, f"attempt {own[1]} of generation {own[0]} of the container writes here now")
        if own != writer.order:
            connection.execute(_RECORD_WRITER, (writer.job, writer.container_id, writer.generation, writer.epoch))
        self._recorded = writer

    def _fenced(self, writer: WriterToken, detail: str) -> WriterFencedError:
        return WriterFencedError(
            f"log.{self.stream} partition {self.partition}", writer, f"{detail}; file '{self.path}'"
        )

    def read(self, start: int, limit: int) -> Records | None:
        """Up to ``limit`` records at offsets ``start, start + 1, ...``, read in one statement.

        None when ``start`` is not retained: at or past the stable end, or below ``oldest`` (trimmed);
        ``state`` tells which. Also None when ``limit`` is below 1. Offsets an aborted transaction held
        are a gap: a read from inside one starts at the next record (``Records.start`` says where), and a
        read stops before one.
        """
        if limit < 1:
            return None
        try:
            rows = self._connection.execute(_READ, (start, limit)).fetchall()
        except sqlite3.Error as error:
            raise self._error(f"cannot read from offset {start}: {error}") from None
        if not rows:
            return None
        first = rows[0][0]
        if first > start:  # a gap (an aborted transaction's records): read on from the next record
            start = first
        rows = _contiguous(rows)
        segments = self._segments
        try:
            payloads = [(row[0], segments.read(*row[1:5])) for row in rows]
        except FileNotFoundError as error:
            if start < self.state().oldest:
                return None  # trimmed meanwhile (by another process): its segment is gone
            raise self._error(f"cannot read from offset {start}: segment file '{error.filename}' is missing") from None
        except (DamagedSegmentError, OSError) as error:
            raise self._error(f"cannot read from offset {start}: {error}") from None
        except (TypeError, ValueError, OverflowError) as error:  # not a segment, position, length and CRC
            raise self._error(f"cannot read from offset {start}: a batch's index row is corrupt ({error!r})") from None
        try:
            return _unpack(payloads, start, limit)
        except (ValueError, TypeError, msgpack.UnpackException) as error:
            raise self._error(f"cannot read from offset {start}: a batch is corrupt ({error!r})") from None

    def readable_from(self, start: int) -> int:
        """``start``, or the end of the gap it lies in: the offset of the next record a reader may see, never
        past the stable end (a reader at ``start`` that found nothing to read moves there)."""
        try:
            row = self._connection.execute(_READABLE_FROM, (start,)).fetchone()
        except sqlite3.Error as error:
            raise self._error(f"cannot read past offset {start}: {error}") from None
        return max(start, int(row[0]))

    def trim(self, before: int) -> int:
        """Remove the records below offset ``before``; return the oldest offset afterwards.

        ``oldest`` only moves forward and never past ``upcoming``: trimming beyond the end empties
        the partition, and the next append still gets the next unused offset. Batches wholly below
        the new ``oldest`` are deleted; one it falls inside stays, its records below ``oldest``
        unreadable. Large trims run in several transactions of at most ``TRIM_CHUNK`` records so
        appenders wait for the lock only briefly. Then the segment files before the first remaining
        batch's are deleted (the one appended to stays, even when the partition is empty).
        """
        self._check_file()
        connection = self._connection
        first_kept: int | None = None
        try:
            while True:
                connection.execute("BEGIN IMMEDIATE")
                try:
                    oldest, _, _, upcoming = connection.execute(_META).fetchone()
                    target = min(max(before, oldest), upcoming, oldest + TRIM_CHUNK)
                    if target > oldest:
                        connection.execute("DELETE FROM batches WHERE end_offset <= ?", (target,))
                        connection.execute("UPDATE meta SET oldest_offset = ? WHERE id = 0", (target,))
                        first_kept = int(connection.execute(_FIRST_SEGMENT_KEPT).fetchone()[0])
                    connection.execute("COMMIT")
                except BaseException:
                    if connection.in_transaction:
                        connection.execute("ROLLBACK")
                    raise
                if target == oldest or target >= min(before, upcoming):
                    break
        except sqlite3.Error as error:
            raise self._error(f"cannot trim before offset {before}: {error}") from None
        if first_kept is not None:
            try:
                self._segments.remove_below(first_kept)
            except OSError as error:  # the next trim that deletes batches tries again
                log.warning("%r: cannot delete trimmed segment files: %s", self, error)
        return int(target)

    def seal(self) -> None:
        """Mark the partition bounded and complete: appends fail, consumers see end-of-stream."""
        try:
            self._connection.execute("UPDATE meta SET sealed = 1 WHERE id = 0")
        except sqlite3.Error as error:
            raise self._error(f"cannot seal the partition: {error}") from None

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """The first retained offset whose timestamp is at or after ``timestamp_ms``; upcoming if none.

        Exact: timestamps need not be monotonic, so this is the first such record in offset order.
        A scan of the batches' ``max_ts`` (no index, which would slow every append) finds the first
        batch holding such a record; only its timestamps column is unpacked. Only the batch a trim
        cut through can hold such a record solely below ``oldest``; the next candidate follows it.
        """
        connection = self._connection
        try:
            connection.execute("BEGIN")
            try:
                oldest, _, _, upcoming = connection.execute(_META).fetchone()
                cursor = connection.execute(_BY_TIMESTAMP, (oldest, timestamp_ms))
                try:
                    for base, min_ts, *payload in cursor:
                        if min_ts >= timestamp_ms and base >= oldest:
                            return int(min(base, upcoming))
                        timestamps = _timestamps(self._segments.read(*payload))
                        for index in range(max(oldest - base, 0), len(timestamps)):
                            if timestamps[index] >= timestamp_ms:
                                return int(min(base + index, upcoming))
                finally:
                    cursor.close()
            finally:
                connection.execute("COMMIT")
        except sqlite3.Error as error:
            raise self._error(f"cannot search for timestamp {timestamp_ms}: {error}") from None
        except (ValueError, TypeError, msgpack.UnpackException) as error:
            raise self._error(f"cannot search for timestamp {timestamp_ms}: a batch is corrupt ({error!r})") from None
        except (DamagedSegmentError, OSError, OverflowError) as error:
            raise self._error(f"cannot search for timestamp {timestamp_ms}: {error}") from None
        return int(upcoming)


def _pack(
    count: int,
    timestamps: Sequence[int],
    keys: Sequence[Any] | None,
    values: Sequence[Any],
    headers: Sequence[Any] | None,
) -> list[tuple[int, int, int, bytes]]:
    """``(count, min_ts, max_ts, payload)`` of each batch ``count`` records given column by column
    are stored as: one batch, or several when its payload would exceed ``MAX_BATCH_BYTES``."""
    if keys is not None and len(keys) == count and all_none(keys):
        keys = None
    if headers is not None and len(headers) == count and all_none(headers):
        headers = None
    if (
        not len(timestamps)
        == count
        == (count if keys is None else len(keys))
        == (count if headers is None else len(headers))
    ):
        raise ValueError("the columns of the batch differ in length")
    payload = msgpack.packb((timestamps, keys, values, headers))
    if len(payload) > MAX_BATCH_BYTES and count > 1:
        half = count // 2
        front = slice(None, half)
        back = slice(half, None)
        return _pack(
            half,
            timestamps[front],
            None if keys is None else keys[front],
            values[front],
            None if headers is None else headers[front],
        ) + _pack(
            count - half,
            timestamps[back],
            None if keys is None else keys[back],
            values[back],
            None if headers is None else headers[back],
        )
    # Sorting finds both bounds in one pass when the timestamps are already in order, as they are
    # when the producer stamps them: several times cheaper than min() and max().
    ordered = sorted(timestamps)
    lowest, highest = ordered[0], ordered[-1]
    if type(lowest) is not int or type(highest) is not int:
        raise TypeError(f"timestamps must be integers, got {type(lowest).__name__} and {type(highest).__name__}")
    return [(count, lowest, highest, payload)]


def _contiguous(rows: list[Any]) -> list[Any]:
    """The leading run of ``rows`` (``base_offset, ..., end_offset``) with no gap between batches."""
    end = rows[0][5]
    for index in range(1, len(rows)):
        row = rows[index]
        if row[0] != end:
            return rows[:index]
        end = row[5]
    return rows


def _placement(first: int, size: int, segment: int, end: int) -> tuple[int, int]:
    """The segment and position a batch of ``size`` bytes starting at offset ``first`` is written at, given
    the segment appended to and its end: a new segment, named ``first``, once it would pass ``SEGMENT_BYTES``."""
    if end and end + size > SEGMENT_BYTES:
        return first, 0
    return segment, end


def _unpack(rows: list[tuple[int, bytes]], start: int, limit: int) -> Records:
    """The records ``start, start + 1, ...`` (at most ``limit``) of consecutive batches ``rows``."""
    unpack = msgpack.unpackb
    if len(rows) == 1:
        base, payload = rows[0]
        timestamps, keys, values, headers = unpack(payload)
        skip = start - base
        if skip or len(values) > limit:
            end = skip + limit
            timestamps = timestamps[skip:end]
            values = values[skip:end]
            if keys is not None:
                keys = keys[skip:end]
            if headers is not None:
                headers = headers[skip:end]
        return Records(start, timestamps, keys, values, headers)
    columns = []
    remaining = limit
    for base, payload in rows:
        batch = unpack(payload)
        count = len(batch[2])
        skip = max(start - base, 0)
        end = min(skip + remaining, count)
        if skip or end < count:
            batch = [None if column is None else column[skip:end] for column in batch]
        columns.append(batch)
        remaining -= end - skip
        if remaining <= 0:
            break
    timestamps, keys, values, headers = zip(*columns, strict=True)
    counts = [len(part) for part in values]
    return Records(
        start, _concat(timestamps), _concat_sparse(keys, counts), _concat(values), _concat_sparse(headers, counts)
    )


def _concat(parts: tuple[list[Any], ...]) -> list[Any]:
    """Join columns of consecutive batches (extending the first, which is ours to change)."""
    out = parts[0]
    for part in parts[1:]:
        out += part
    return out


def _concat_sparse(parts: tuple[list[Any] | None, ...], counts: list[int]) -> list[Any] | None:
    """Join a column that a batch leaves out (None) when it is all None; None when every batch does."""
    if all_none(parts):
        return None
    out: list[Any] = []
    for part, count in zip(parts, counts, strict=True):
        out += part if part is not None else [None] * count
    return out


def _timestamps(payload: bytes) -> list[int]:
    """The timestamps column of a batch, without building its keys and values."""
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(payload), 1))  # the default 100 MiB may not do
    unpacker.feed(payload)
    unpacker.read_array_header()
    timestamps: list[int] = unpacker.unpack()
    return timestamps


def create_partition_files(paths: Sequence[Path], stream: str, *, fsync: bool = False) -> None:
    """Create an empty partition file at each of ``paths`` (none may exist yet; partition numbers in order).

    SQLite makes the first; the others are byte copies of it with an incarnation of their own (the header's
    application id), each written to a new file (never over one that exists) and, with ``fsync``, synced with
    its directory. An empty partition file records nothing of its stream or its number (the same bytes whatever
    they are, but for the incarnation), so a copy is exactly what SQLite would have made, for one write instead
    of a connection, its journal files, the schema's transaction and a close. A process holding thousands of
    partition files open also spares SQLite its search of them at each creation."""
    if not paths:
        return
    LogPartition(paths[0], stream, 0, fsync=fsync, create=True).close()
    image = bytearray(paths[0].read_bytes())
    for partition, path in enumerate(paths[1:], start=1):
        image[_INCARNATION_BYTES] = _new_incarnation().to_bytes(4, "big")
        try:
            with open(path, "xb") as file:
                file.write(image)
                if fsync:
                    file.flush()
                    os.fsync(file.fileno())
        except OSError as error:
            raise LogStorageError(stream, partition, path, f"cannot create the partition file: {error}") from None
    if fsync:
        sync_dir(paths[0].parent)


def _new_incarnation() -> int:
    """A new file's incarnation: random, positive, never 0 (which files made before incarnations read as)."""
    return secrets.randbelow(_MAX_INCARNATION) + 1


def _settings(*, fsync: bool, page_cache: bool) -> str:
    """The connection's settings as one script: ``executescript`` runs it without caching a statement per pragma
    (Python's ``sqlite3`` keeps every statement ``execute`` ran, and the cursor's weak reference, for the
    connection's life: seven objects and 7 KB more per open partition, measured, at thousands of partitions).
    ``busy_timeout`` is the connection's ``timeout``."""
    cache = "" if page_cache else "PRAGMA cache_size = 0; "
    return f"{cache}PRAGMA synchronous = {'FULL' if fsync else 'NORMAL'}; PRAGMA mmap_size = {MMAP_SIZE};"


def _identity(path: Path) -> tuple[int, int]:
    status = os.stat(path)
    return (status.st_dev, status.st_ino)

"""Reads registered log partitions from given offsets.

An open partition holds one read connection, without a page cache of its own (reads come through the
memory map), about 70 KB and three or four file descriptors. At most ``open_max``
(``systems.<s>.consumer.open.partitions.max``) are open at once, the least recently read closed first
(partitions are opened lazily: registering one opens it only to check its offset, or takes the file
``describe`` opened to read its offsets for the container's start). A closed partition holds
no descriptor and a few hundred bytes. A poll issues one SELECT per partition, which
returns the stored batches covering the next ``systems.<s>.poll.batch.size`` records (see ``storage``); their
columns are unpacked by msgpack and the envelopes built column-wise with ``map``, so the per-record
work stays in C apart from the envelope's own ``__init__``. The partition's meta row is read only
when that SELECT returns nothing, to tell the end of the data from a trim and to see whether the
partition is sealed.

A partition found with nothing to read, nothing held by a transaction and not at its end is *quiet*: the
consumer keeps the file's ``data_version`` from before that read, and later polls ask only for it (one
statement that touches no page, a fifth of a read and its meta query) until it changes, which SQLite
guarantees on any commit to the file by any other connection. So a poll over many idle partitions costs
little per partition, and nothing is missed: an append, a seal, a trim or a transaction's end all commit.
A file deleted or re-created under a quiet partition commits nothing to the file the consumer has open, so
a quiet partition is checked at least every ``QUIET_RECHECK_MS`` as well (and fails then, as any partition
whose file was replaced does).

A partition quiet for ``QUIET_RECHECK_MS`` is closed (so an idle partition holds no connection and no
descriptor), and so is a quiet one the pool closes: it keeps its quietness as a *signature* of its files
(``stat_watch``, which holds the file's inode, so a replaced file changes it too),
taken after its ``data_version`` proved it still quiet and trusted only when it sees every commit since that
check; a poll then costs two ``os.stat`` calls for it, and the partition is reopened and read in full when
the signature changes, or at least every ``CLOSED_RECHECK_MS`` as a backstop. A partition closed while it
had data to read (or a racy signature) is reopened by the next poll that asks for it, so every partition is
still read at every poll however small the pool: none is starved, only reopened. A reopened file must be the
one first opened (``LogPartition.identity``): one deleted or replaced meanwhile fails the poll, as it fails
an open partition.

The cyclic garbage collector is paused while a poll builds its batches. A batch allocates a
container object per record (the envelope) that all outlive the poll; left running, the collector
would walk the young generation several times per batch and promote the batch through every
generation. Paused, it finds the whole batch in one young-generation pass after the poll.
Envelopes hold no cycles, so nothing is leaked.
"""

from __future__ import annotations

import gc
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Set
from itertools import repeat
from typing import cast

from millstream.contracts.systems import RecordBatch, SystemConsumer, SystemStreamPartitionMetadata
from millstream.embedded.log import bulk_read, stat_watch
from millstream.embedded.log.errors import (
    InvalidOffsetError,
    LogOffsetOutOfRangeError,
    LogStorageError,
    LogSystemError,
)
from millstream.embedded.log.expiry import Reaper
from millstream.embedded.log.layout import LogLayout, StreamInfo
from millstream.embedded.log.metadata import settled_metadata
from millstream.embedded.log.open_files import pool_bounds
from millstream.embedded.log.stat_watch import Signature
from millstream.embedded.log.storage import LogPartition, Records
from millstream.embedded.log.transactions import wall_clock_ms
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition

MAX_IDLE_SLEEP = 0.01
"""Longest sleep between two checks for new data while a poll waits, unless the checks cost more (below)."""
IDLE_CHECK_RATIO = 9
"""While a poll waits, it sleeps at least this many times as long as its last pass over the partitions took,
so that checking for new data costs at most about a tenth of a core however many partitions it reads (a
container reading 500 idle partitions checks every 30 ms or so instead of every 10 ms)."""
QUIET_RECHECK_MS = 1000
"""How long a partition stays open while quiet: then it is closed and watched through its files' signature
(which also sees its file replaced), or, when that cannot be trusted, read in full at the next poll."""
CLOSED_RECHECK_MS = 60_000
"""Longest time a closed quiet partition goes without being reopened and read in full: the backstop behind its
files' signature (``stat_watch``), spread thin because reopening costs about as much as a hundred stats."""


def parse_offset(ssp: SystemStreamPartition, offset: str) -> int:
    try:
        value = int(offset)
    except (TypeError, ValueError):
        raise InvalidOffsetError(ssp.stream, ssp.partition, offset) from None
    if value < 0:
        raise InvalidOffsetError(ssp.stream, ssp.partition, offset)
    return value


class _Cursor:
    __slots__ = ("ended", "identity", "partition", "path", "position", "quiet_since", "quiet_version", "signature")

    def __init__(self, partition: LogPartition, position: int) -> None:
        self.partition: LogPartition | None = partition
        """The open partition; None while the pool has it closed."""
        self.path = str(partition.path)
        self.identity = partition.identity
        """The file first opened: a reopened one must be it."""
        self.position = position
        self.ended = False
        self.quiet_version: int | None = None
        """The file's ``data_version`` before the read that found the partition quiet; None: not quiet."""
        self.quiet_since = 0
        """When (the consumer's clock, ms) it was last read and inspected in full while quiet."""
        self.signature: Signature | None = None
        """Closed while quiet: its files' trusted signature (``stat_watch``); None: read it when asked."""


class LogSystemConsumer(SystemConsumer):
    """``SystemConsumer`` of the embedded log.

    Envelopes of one partition come in offset order with ``str`` offsets, bytes keys and values
    (None where none was written), headers decoded (None when there were none) and ``size`` the
    length of the value. A sealed partition, once read to its end, yields one end-of-stream envelope
    and nothing after it. ``poll`` leaves out partitions that have nothing. One thread at a time. A partition
    held at its stable end by a transaction past its ``transaction.timeout.ms`` is freed by the poll that finds
    it (``expiry``): the transaction is aborted and the reader steps over its records.
    """

    def __init__(
        self,
        system: str,
        layout: LogLayout,
        *,
        batch_size: int = 5000,
        fsync: bool = False,
        open_max: int | None = None,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        if open_max is None:  # the factory's default: one source of it (``open_files``)
            open_max = pool_bounds(None, None, None).consumer
        if open_max < 1:
            raise ValueError(f"open_max must be >= 1, got {open_max}")
        self.system = system
        self.layout = layout
        self.batch_size = batch_size
        self.open_max = open_max
        self._fsync = fsync
        self._cursors: dict[SystemStreamPartition, _Cursor] = {}
        self._open: OrderedDict[SystemStreamPartition, _Cursor] = OrderedDict()
        """The cursors whose partition is open, least recently read first."""
        self._infos: dict[str, StreamInfo] = {}
        """Each registered stream's ``stream.json``, read once for all its partitions."""
        self._clock = clock
        self._started = False
        self._reaper = Reaper(system, layout, fsync=fsync, clock=clock)
        """Ends a transaction past its deadline that holds a partition at its stable end (``expiry``)."""
        self._described: OrderedDict[SystemStreamPartition, LogPartition] = OrderedDict()
        """What ``describe`` opened and no ``register`` took yet, least recently described first."""

    @property
    def open_partitions(self) -> int:
        """How many partition files the consumer holds open now (at most ``open_max`` between polls)."""
        return len(self._open)

    def describe(
        self, ssps: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        """``LogSystemAdmin.get_ssp_metadata`` for partitions about to be registered (``DescribingSystemConsumer``),
        keeping each file open for its ``register``: a container's start-up opens each input partition once, not
        once in the admin and again here. At most ``open_max`` stay open, the least recently described closed
        first (``register`` opens those again); ``start`` and ``stop`` close what no ``register`` took. A partition
        that does not exist is left out; one that cannot be read raises, naming it."""
        if self._started:
            raise LogSystemError(f"cannot describe partitions after the consumer of system '{self.system}' started")
        result = {}
        for ssp in ssps:
            if ssp.system != self.system:
                raise LogSystemError(f"consumer of system '{self.system}' cannot describe {ssp}")
            info = self._infos.get(ssp.stream) or self.layout.read_info(ssp.stream)
            if info is None or not 0 <= ssp.partition < info.partition_count:
                continue
            self._infos[ssp.stream] = info
            self._described[ssp] = partition = self._described_file(ssp) or self._open_file(ssp)
            result[ssp] = settled_metadata(partition, self._reaper)
            while len(self._described) > self.open_max:
                self._described.popitem(last=False)[1].close()
        return result

    def _described_file(self, ssp: SystemStreamPartition) -> LogPartition | None:
        """The file ``describe`` kept open for ``ssp``, taken; None when there is none or it was deleted or
        replaced since (then closed: the caller opens the current one)."""
        partition = self._described.pop(ssp, None)
        if partition is not None and not partition.is_current():
            partition.close()
            return None
        return partition

    def _close_described(self) -> None:
        while self._described:
            self._described.popitem()[1].close()

    def register(self, ssp: SystemStreamPartition, offset: str) -> None:
        """Read ``ssp`` from ``offset`` (inclusive); registering it again keeps the earlier offset.

        Raises ``StreamNotFoundError`` for a missing stream and ``LogOffsetOutOfRangeError`` for an
        offset below the oldest retained one or beyond the upcoming one.
        """
        if ssp.system != self.system:
            raise LogSystemError(f"consumer of system '{self.system}' cannot read {ssp}")
        if self._started:
            raise LogSystemError(f"cannot register {ssp} after the consumer of system '{self.system}' started")
        position = parse_offset(ssp, offset)
        cursor = self._cursors.get(ssp)
        if cursor is None:
            cursor = _Cursor(self._described_file(ssp) or self._open_file(ssp), position)
        else:
            position = min(position, cursor.position)
        partition = self._opened(ssp, cursor) if ssp in self._cursors else cast(LogPartition, cursor.partition)
        version = partition.version()
        state = partition.state()
        if not state.oldest <= position <= state.upcoming:
            if ssp not in self._cursors:
                partition.close()
            raise LogOffsetOutOfRangeError(ssp.stream, ssp.partition, position, state.oldest, state.upcoming)
        cursor.position = position
        cursor.quiet_version = None
        if state.settled and not state.sealed and position >= state.upcoming:  # nothing to read: quiet already
            cursor.quiet_version, cursor.quiet_since = version, self._clock()
        self._cursors[ssp] = cursor
        self._open[ssp] = cursor
        self._open.move_to_end(ssp)
        self._shrink()

    def _opened(self, ssp: SystemStreamPartition, cursor: _Cursor) -> LogPartition:
        """``cursor``'s partition, reopened if the pool closed it (a file replaced since fails), as the most
        recently read; the pool may exceed its bound until ``_shrink``."""
        partition = cursor.partition
        if partition is not None:
            self._open.move_to_end(ssp)
            return partition
        partition = self._open_file(ssp)
        if partition.identity != cursor.identity:
            partition.close()
            raise partition.replaced_error()
        cursor.partition, cursor.signature, cursor.quiet_version = partition, None, None
        self._open[ssp] = cursor
        return partition

    def _shrink(self) -> None:
        """Close the least recently read partitions beyond ``open_max``; a quiet one keeps a trusted signature."""
        while len(self._open) > self.open_max:
            _, cursor = self._open.popitem(last=False)
            self._close(cursor)

    def _close(self, cursor: _Cursor) -> None:
        partition = cast(LogPartition, cursor.partition)
        cursor.partition, cursor.signature = None, None
        quiet, cursor.quiet_version = cursor.quiet_version, None
        if quiet is None or cursor.ended:
            partition.close()
            return
        checked = time.time_ns()
        try:
            still_quiet = partition.version() == quiet
        except LogStorageError:  # the next poll reopens it and reports what is wrong
            still_quiet = False
        partition.close()  # closing may checkpoint the file: the signature is taken after it
        if still_quiet:  # nothing committed up to ``checked``; the signature must see every commit from then on
            signature = stat_watch.trusted(cursor.path, checked)
            if signature is not None and signature[:2] == cursor.identity[:2]:  # not a file replaced meanwhile
                cursor.signature = signature

    def _open_file(self, ssp: SystemStreamPartition) -> LogPartition:
        info = self._infos.get(ssp.stream)
        if info is None:
            info = self._infos[ssp.stream] = self.layout.require_info(ssp.stream)
        if not 0 <= ssp.partition < info.partition_count:
            raise LogSystemError(
                f"log stream '{ssp.stream}' has partitions 0..{info.partition_count - 1}; "
                f"cannot read partition {ssp.partition}"
            )
        path = self.layout.partition_path(ssp.stream, ssp.partition)
        return LogPartition(path, ssp.stream, ssp.partition, fsync=self._fsync, page_cache=False)

    def start(self) -> None:
        self._close_described()
        self._started = True

    def stop(self) -> None:
        self._close_described()
        for cursor in self._cursors.values():
            if cursor.partition is not None:
                cursor.partition.close()
                cursor.partition = None
        self._cursors.clear()
        self._open.clear()
        self._infos.clear()
        self._reaper.close()
        self._started = False

    def poll(
        self, ssps: Set[SystemStreamPartition], timeout: float
    ) -> dict[SystemStreamPartition, list[IncomingMessageEnvelope]]:
        """A batch per partition that has data; waits up to ``timeout`` seconds when none has.

        Returns as soon as any partition has data. Raises ``LogOffsetOutOfRangeError`` when the
        records at a partition's position were trimmed while it was being read.
        """
        deadline: float | None = None
        sleep = 0.001
        first_pass = True
        while True:
            result = {}
            collecting = gc.isenabled()
            if collecting:
                gc.disable()
            wall, swept_from = self._clock(), time.monotonic()
            try:
                for ssp in ssps:
                    cursor = self._cursors.get(ssp)
                    if cursor is None:
                        raise LogSystemError(f"{ssp} was not registered with the consumer of system '{self.system}'")
                    if cursor.ended:
                        continue
                    envelopes = self._read(ssp, cursor, first_pass, wall)
                    if envelopes:
                        result[ssp] = envelopes
                    if len(self._open) > self.open_max:
                        self._shrink()
            finally:
                if collecting:
                    gc.enable()
            if result or timeout <= 0:
                return result
            first_pass = False
            now = time.monotonic()
            if deadline is None:
                deadline = now + timeout
            remaining = deadline - now
            if remaining <= 0:
                return result
            time.sleep(min(max(sleep, (now - swept_from) * IDLE_CHECK_RATIO), remaining))
            sleep = min(sleep * 2, MAX_IDLE_SLEEP)

    def position(self, ssp: SystemStreamPartition) -> str | None:
        """Past the gaps aborted transactions left once a poll found nothing before the stable end."""
        cursor = self._cursors.get(ssp)
        return None if cursor is None else str(cursor.position)

    def read_range(self, ssp: SystemStreamPartition, start: str, end: str) -> Generator[RecordBatch, None, None]:
        """The ``BulkReadingSystemConsumer`` capability: ``ssp``'s records from ``start`` through ``end`` as
        columns (``bulk_read``), on a partition file of its own that the read closes when done."""
        if ssp.system != self.system:
            raise LogSystemError(f"consumer of system '{self.system}' cannot read {ssp}")
        first, last = parse_offset(ssp, start), parse_offset(ssp, end)
        if first > last:
            return
        partition = self._open_file(ssp)
        try:
            yield from bulk_read.read_range(partition, first, last, self.batch_size)
        finally:
            partition.close()

    def _read(
        self, ssp: SystemStreamPartition, cursor: _Cursor, inspect: bool, now: int
    ) -> list[IncomingMessageEnvelope]:
        """The next batch of ``ssp``; when there is none and ``inspect``, the end-of-stream or a trim.

        While a poll waits, only its first pass inspects the meta row: waiting costs one SELECT per
        partition per check, and a seal or a trim that happens meanwhile is seen by the next poll. A quiet
        partition (module docstring) costs one ``data_version`` query until its file changes or its full
        inspection is due; a closed quiet one, two ``os.stat`` calls until its signature changes or its backstop
        is due. Any other closed partition is reopened and read.
        """
        partition = cursor.partition
        if partition is None:
            known = cursor.signature
            if (
                known is not None
                and 0 <= now - cursor.quiet_since < CLOSED_RECHECK_MS
                and stat_watch.signature(cursor.path) == known
            ):
                return []
            partition = self._opened(ssp, cursor)
            inspect = True
        else:
            self._open.move_to_end(ssp)
            quiet = cursor.quiet_version
            if quiet is not None:
                if partition.version() == quiet:
                    if 0 <= now - cursor.quiet_since < QUIET_RECHECK_MS:
                        return []
                    if partition.is_current():  # quiet for a while: release its files, watch its signature instead
                        del self._open[ssp]
                        self._close(cursor)
                        return []
                cursor.quiet_version = None
                inspect = True
        position = cursor.position
        records = partition.read(position, self.batch_size)
        if records is not None:
            values = records.values
            try:
                envelopes = _envelopes(ssp, records, map(len, values))
            except TypeError:  # a value is None (a tombstone), which len refuses: build the batch again
                envelopes = _envelopes(ssp, records, [0 if value is None else len(value) for value in values])
            cursor.position = records.start + len(values)
            return envelopes
        if not inspect:
            return []
        return self._inspect(ssp, cursor, partition, now)

    def _inspect(
        self, ssp: SystemStreamPartition, cursor: _Cursor, partition: LogPartition, now: int
    ) -> list[IncomingMessageEnvelope]:
        """After a read found nothing: a trim raises, a gap is stepped over, a sealed partition's end yields its
        end-of-stream, and a partition with nothing to come but new appends becomes quiet. The version is read
        before the meta row, so a commit between the read and the meta row is in the row (and the partition is
        not quiet) or after the version (and changes it)."""
        position = cursor.position
        version = partition.version()
        state = partition.state()
        if position < state.oldest:
            raise LogOffsetOutOfRangeError(ssp.stream, ssp.partition, position, state.oldest, state.upcoming)
        if position < state.upcoming:  # an aborted transaction's gap, or records published since the read
            cursor.position = position = partition.readable_from(position)
        if not state.settled and position >= state.upcoming and self._reaper.settle(partition):
            return []  # the stable end moved: the next poll reads on
        if state.sealed and state.settled and position >= state.upcoming:
            cursor.ended = True
            del self._open[ssp]  # nothing more to read: its files are released now
            cursor.partition = None
            partition.close()
            return [IncomingMessageEnvelope.end_of_stream(ssp)]
        if state.settled and position >= state.upcoming:
            cursor.quiet_version, cursor.quiet_since = version, now
        return []


def _envelopes(ssp: SystemStreamPartition, records: Records, sizes: Iterable[int]) -> list[IncomingMessageEnvelope]:
    """One envelope per record, built column by column so that the loop runs in C."""
    count = len(records.values)
    start = records.start
    keys = records.keys
    headers = records.headers
    return list(
        map(
            IncomingMessageEnvelope,
            repeat(ssp, count),
            map(repr, range(start, start + count)),  # an int's repr is its str, and a cheaper call
            repeat(None, count) if keys is None else keys,
            records.values,
            records.timestamps,
            repeat(None, count) if headers is None else headers,
            sizes,
        )
    )

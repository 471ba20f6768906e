"""Reads registered log partitions from given offsets.

Each partition keeps one read connection, without a page cache of its own (reads come through the
memory map), so an idle partition costs well under 100 KB. A poll issues one SELECT per partition, which
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
a quiet partition is inspected in full at least every ``QUIET_RECHECK_MS`` as well (and fails then, as
any partition whose file was replaced does).

The cyclic garbage collector is paused while a poll builds its batches. A batch allocates a
container object per record (the envelope) that all outlive the poll; left running, the collector
would walk the young generation several times per batch and promote the batch through every
generation. Paused, it finds the whole batch in one young-generation pass after the poll.
Envelopes hold no cycles, so nothing is leaked.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Generator, Iterable, Set
from itertools import repeat

from millstream.model import IncomingMessageEnvelope, SystemStreamPartition
from millstream.systems.base import RecordBatch, SystemConsumer
from millstream.systems.log import bulk_read
from millstream.systems.log.errors import InvalidOffsetError, LogOffsetOutOfRangeError, LogSystemError
from millstream.systems.log.expiry import Reaper
from millstream.systems.log.layout import LogLayout, StreamInfo
from millstream.systems.log.storage import LogPartition, Records
from millstream.systems.log.transactions import wall_clock_ms

MAX_IDLE_SLEEP = 0.01
"""Longest sleep between two checks for new data while a poll waits, unless the checks cost more (below)."""
IDLE_CHECK_RATIO = 9
"""While a poll waits, it sleeps at least this many times as long as its last pass over the partitions took,
so that checking for new data costs at most about a tenth of a core however many partitions it reads (a
container reading 500 idle partitions checks every 30 ms or so instead of every 10 ms)."""
QUIET_RECHECK_MS = 1000
"""Longest time a quiet partition goes without a full read and inspection (which sees its file replaced)."""


def parse_offset(ssp: SystemStreamPartition, offset: str) -> int:
    try:
        value = int(offset)
    except (TypeError, ValueError):
        raise InvalidOffsetError(ssp.stream, ssp.partition, offset) from None
    if value < 0:
        raise InvalidOffsetError(ssp.stream, ssp.partition, offset)
    return value


class _Cursor:
    __slots__ = ("ended", "partition", "position", "quiet_since", "quiet_version")

    def __init__(self, partition: LogPartition, position: int) -> None:
        self.partition = partition
        self.position = position
        self.ended = False
        self.quiet_version: int | None = None
        """The file's ``data_version`` before the read that found the partition quiet; None: not quiet."""
        self.quiet_since = 0
        """When (the consumer's clock, ms) it was last read and inspected in full while quiet."""


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
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.system = system
        self.layout = layout
        self.batch_size = batch_size
        self._fsync = fsync
        self._cursors: dict[SystemStreamPartition, _Cursor] = {}
        self._infos: dict[str, StreamInfo] = {}
        """Each registered stream's ``stream.json``, read once for all its partitions."""
        self._clock = clock
        self._started = False
        self._reaper = Reaper(system, layout, fsync=fsync, clock=clock)
        """Ends a transaction past its deadline that holds a partition at its stable end (``expiry``)."""

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
            cursor = _Cursor(self._open(ssp), position)
        else:
            position = min(position, cursor.position)
        state = cursor.partition.state()
        if not state.oldest <= position <= state.upcoming:
            if ssp not in self._cursors:
                cursor.partition.close()
            raise LogOffsetOutOfRangeError(ssp.stream, ssp.partition, position, state.oldest, state.upcoming)
        cursor.position = position
        self._cursors[ssp] = cursor

    def _open(self, ssp: SystemStreamPartition) -> LogPartition:
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
        self._started = True

    def stop(self) -> None:
        for cursor in self._cursors.values():
            cursor.partition.close()
        self._cursors.clear()
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
        partition = self._open(ssp)
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
        inspection is due.
        """
        quiet = cursor.quiet_version
        if quiet is not None:
            if 0 <= now - cursor.quiet_since < QUIET_RECHECK_MS and cursor.partition.version() == quiet:
                return []
            cursor.quiet_version = None
            inspect = True
        position = cursor.position
        records = cursor.partition.read(position, self.batch_size)
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
        return self._inspect(ssp, cursor, now)

    def _inspect(self, ssp: SystemStreamPartition, cursor: _Cursor, now: int) -> list[IncomingMessageEnvelope]:
        """After a read found nothing: a trim raises, a gap is stepped over, a sealed partition's end yields its
        end-of-stream, and a partition with nothing to come but new appends becomes quiet. The version is read
        before the meta row, so a commit between the read and the meta row is in the row (and the partition is
        not quiet) or after the version (and changes it)."""
        position = cursor.position
        version = cursor.partition.version()
        state = cursor.partition.state()
        if position < state.oldest:
            raise LogOffsetOutOfRangeError(ssp.stream, ssp.partition, position, state.oldest, state.upcoming)
        if position < state.upcoming:  # an aborted transaction's gap, or records published since the read
            cursor.position = position = cursor.partition.readable_from(position)
        if not state.settled and position >= state.upcoming and self._reaper.settle(cursor.partition):
            return []  # the stable end moved: the next poll reads on
        if state.sealed and state.settled and position >= state.upcoming:
            cursor.ended = True
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

"""``spark.readStream.format("millstream")`` over a stream of shards that come and go (Kinesis), read parents
first, through the admin's :class:`~millstream.contracts.systems.ShardedSystemAdmin` capability.

Spark's offset for a Kinesis stream names shards, not partitions::

    {"planned_at": 1700000000000,
     "read": {"shardId-000000000000": {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": 1699999990001}},
     "closing": ["shardId-000000000000"],
     "shards": {"shardId-000000000001": {"start": {"ShardIteratorType": "TRIM_HORIZON"}, "active": true}},
     "finished": ["shardId-000000000000"],
     "startpoint": {"created": 1700000000000}}

An offset describes the micro-batch that ends at it: ``read`` is where each shard's read starts, and every
read takes the records that arrived by ``planned_at`` (the shard's tip at that instant, or the end of a
shard in ``closing``, which was closed when the batch was planned). ``shards`` is where the next batch
starts: a shard read up to ``planned_at`` continues at ``AT_TIMESTAMP planned_at + 1``; a closed shard read
to its end moves to ``finished`` and leaves the offset (``finished`` keeps only the ids Kinesis still lists).

**Resharding.** Shards are listed at each planning (``latestOffset``). A shard is read (``active``) only
once none of its parents is left in ``shards``: a child waits at its start while its parents are read to
their end, and is read from the next batch on. So every partition key's records reach the sink in the order
they were written, across splits and merges, even by a sink that writes a batch's partitions in parallel
(open-source Spark's Kinesis readers read children alongside their parents).

**Startpoints.** ``millstream startpoint set job.yaml --stream kinesis.views --all-partitions --oldest``
(``--partition 0`` is enough: the newest startpoint of any of the stream's slots counts) moves the query
as it moves a job: ``--oldest`` rereads every listed shard, parents first; ``--upcoming`` skips to records
that arrive after the next planning; ``--timestamp`` starts every listed shard at that arrival time;
``--offset shardId-000000000001:<sequence number>[,...]`` starts the named shards there (their parents count
as read; their children start over behind them). The batch planned with it reads from it; the startpoint is
deleted once that batch has finished, as for partitioned streams.

The handover between batches goes by arrival time: a batch reads what arrived by ``planned_at``, the next
from ``planned_at + 1``. Kinesis gives each record its arrival time when it is written, in order per shard.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.contracts.startpoints import (
    Startpoint,
    StartpointOldest,
    StartpointSpecific,
    StartpointTimestamp,
    StartpointUpcoming,
    now_ms,
)
from millstream.contracts.systems import ShardDescription, ShardedSystemAdmin, SystemAdmin
from millstream.model import SystemStream, SystemStreamPartition
from millstream.spark.sources.batch_reader import ReadOptions, StreamDataFrameReader, StreamInputPartition
from millstream.spark.sources.read_bounds import StreamReadError
from millstream.spark.sources.shard_read import ShardRange, parents_first, shard_number, sharded_admin
from millstream.startpoint.manager import StartpointManager
from millstream.startpoint.settings import StartpointConfig

if TYPE_CHECKING:
    import pyarrow

TRIM_HORIZON: dict[str, Any] = {"ShardIteratorType": "TRIM_HORIZON"}

ShardOffsets = Callable[[str], dict[str, str]]
"""The sharded admin's ``shard_offsets``: shard id → offset of a startpoint's ``shardId:offset[,...]``."""


def _at(timestamp_ms: int) -> dict[str, Any]:
    return {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": timestamp_ms}


@dataclass
class ShardOffset:
    """Spark's offset for a Kinesis stream (the module docstring describes its JSON)."""

    planned_at: int
    read: dict[str, dict[str, Any]] = field(default_factory=dict)
    closing: list[str] = field(default_factory=list)
    shards: dict[str, dict[str, Any]] = field(default_factory=dict)
    finished: list[str] = field(default_factory=list)
    startpoint: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "planned_at": self.planned_at,
            "read": self.read,
            "closing": sorted(self.closing),
            "shards": self.shards,
            "finished": sorted(self.finished),
            "startpoint": self.startpoint,
        }

    @classmethod
    def of(cls, document: dict[str, Any]) -> ShardOffset:
        return cls(
            int(document.get("planned_at", 0)),
            {k: dict(v) for k, v in document.get("read", {}).items()},
            list(document.get("closing", [])),
            {k: dict(v) for k, v in document.get("shards", {}).items()},
            list(document.get("finished", [])),
            dict(document.get("startpoint", {})),
        )


class ShardedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches of a Kinesis stream on the driver (shards, startpoints); each Spark task reads one
    shard's range with the batch reader. Holds only options, so Spark can ship it to its workers."""

    def __init__(self, options: ReadOptions, job: str | None, starting: Startpoint) -> None:
        self.options = options
        self.job = job
        self.starting = starting
        self.target: int | None = None
        """With ``Trigger.AvailableNow``: the instant the query started, whose records it reads up to."""

    @property
    def config(self) -> Settings:
        """The job's settings, built once with the options (each view parsed once, not once per batch)."""
        return self.options.settings

    @property
    def stream(self) -> SystemStream:
        return self.options.stream

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """Every listed shard at ``startingOffsets`` (oldest by default), parents before children; nothing read."""
        planned_at = now_ms()
        offset = ShardOffset(planned_at)
        with _sharded(self.config, self.stream) as admin:
            _apply(offset, _listed(admin, self.stream), self.starting, planned_at, admin.shard_offsets)
        return offset.to_json()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        self.target = now_ms()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """The batch after ``start``: the shards listed now, a startpoint not yet applied, what to read."""
        begun = ShardOffset.of(start)
        planned_at = self.target if self.target is not None else now_ms()
        offset = ShardOffset(planned_at, {}, [], dict(begun.shards), list(begun.finished), dict(begun.startpoint))
        with _sharded(self.config, self.stream) as admin, metadata_store(self._stream_config) as store:
            shards = _listed(admin, self.stream)
            manager = StartpointManager(store, self.config.view(StartpointConfig).max_age_ms)
            startpoint = self._newest_startpoint(manager)
            if startpoint is not None:
                if begun.startpoint.get("created") == startpoint.creation_timestamp:
                    self._delete(manager, startpoint.creation_timestamp)  # the batch that applied it has finished
                else:
                    _apply(offset, shards, startpoint, planned_at, admin.shard_offsets)
                    offset.startpoint = {"created": startpoint.creation_timestamp}
        _plan(offset, shards, planned_at, str(self.stream))
        moved = (offset.shards, sorted(offset.finished), offset.startpoint)
        if not offset.read and moved == (begun.shards, sorted(begun.finished), begun.startpoint):
            return start  # nothing to read and nothing moved: availableNow ends here, without an empty batch
        return offset.to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One Spark partition per shard ``end`` reads, parents first, up to its planning instant."""
        ending = ShardOffset.of(end)
        return [
            StreamInputPartition(ShardRange(self._ssp(shard_id), shard_id, begin, ending.planned_at))
            for shard_id, begin in sorted(ending.read.items())
        ]

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        return StreamDataFrameReader(self.options).read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark finished every batch up to ``end``: the startpoint it applied is done with."""
        created = ShardOffset.of(end).startpoint.get("created")
        if created is None:
            return
        with metadata_store(self._stream_config) as store:
            self._delete(StartpointManager(store, self.config.view(StartpointConfig).max_age_ms), int(created))

    @functools.cached_property
    def _stream_config(self) -> Settings:
        """The settings whose metadata store holds the query's startpoints: ``job.name`` from option ``job``;
        built on first use and kept for the query's batches (not pickled with the reader, see ``__getstate__``)."""
        return self.config if not self.job else self.config.with_overrides({"job.name": self.job})

    def __getstate__(self) -> dict[str, Any]:
        """What Spark ships to its workers: the options and the reader's plan, not settings built from them."""
        return {name: value for name, value in self.__dict__.items() if name != "_stream_config"}

    def _ssp(self, shard_id: str) -> SystemStreamPartition:
        return self.stream.partition(shard_number(shard_id))

    def _slots(self) -> list[SystemStreamPartition]:
        """The stream's slots, the partitions ``millstream startpoint set`` writes a Kinesis startpoint to."""
        with _admin(self.config, self.stream) as admin:
            metadata = admin.get_system_stream_metadata([self.stream.stream]).get(self.stream.stream)
        return [self.stream.partition(slot) for slot in sorted(metadata.partitions)] if metadata else []

    def _newest_startpoint(self, manager: StartpointManager) -> Startpoint | None:
        found = [sp for sp in (manager.read_startpoint(ssp) for ssp in self._slots()) if sp is not None]
        return max(found, key=lambda sp: sp.creation_timestamp, default=None)

    def _delete(self, manager: StartpointManager, created: int) -> None:
        for ssp in self._slots():
            startpoint = manager.read_startpoint(ssp)
            if startpoint is not None and startpoint.creation_timestamp == created:
                manager.delete_startpoint(ssp)


def _plan(offset: ShardOffset, shards: Sequence[ShardDescription], planned_at: int, stream: str) -> None:
    """Fill ``offset.read`` from the shards listed at ``planned_at``, then move them on for the next batch.

    A shard the query has not read to its end that Kinesis no longer lists (it passed the stream's retention
    while the query was stopped or behind) is an error, never skipped: its unread records are gone."""
    listed = {shard.shard_id: shard for shard in shards}
    expired = sorted(shard_id for shard_id in offset.shards if shard_id not in listed)
    if expired:
        raise StreamReadError(
            f"stream '{stream}': shard(s) {', '.join(expired)} left Kinesis (past the stream's retention) before "
            "this query read them to their end, so their unread records are lost; to go on without them, move "
            "the query with a startpoint (millstream startpoint set ... --oldest, --timestamp or --upcoming)"
        )
    offset.finished = [shard_id for shard_id in offset.finished if shard_id in listed]
    for shard in shards:
        if shard.shard_id not in offset.shards and shard.shard_id not in offset.finished:
            offset.shards[shard.shard_id] = {"start": TRIM_HORIZON, "active": False}
    offset.shards = {shard_id: state for shard_id, state in offset.shards.items() if shard_id in listed}
    _activate(offset, shards)
    for shard in shards:
        state = offset.shards.get(shard.shard_id)
        if state is None or not state["active"]:
            continue
        begin = state["start"]
        later = begin.get("ShardIteratorType") == "AT_TIMESTAMP" and begin["Timestamp"] > planned_at
        if not later:
            offset.read[shard.shard_id] = begin
        if shard.closed:
            offset.closing.append(shard.shard_id)
            offset.finished.append(shard.shard_id)
            del offset.shards[shard.shard_id]
        elif not later:  # a start after this planning (a startpoint's timestamp) waits for its instant
            state["start"] = _at(planned_at + 1)
    _activate(offset, shards)


def _activate(offset: ShardOffset, shards: Sequence[ShardDescription]) -> None:
    """Shards none of whose parents is left to read become active."""
    for shard in shards:
        state = offset.shards.get(shard.shard_id)
        if state is not None and not any(parent in offset.shards for parent in shard.parents):
            state["active"] = True


def _apply(
    offset: ShardOffset,
    shards: Sequence[ShardDescription],
    startpoint: Startpoint,
    planned_at: int,
    shard_offsets: ShardOffsets,
) -> None:
    """Move every listed shard to ``startpoint`` (as the module docstring says); read from the next planning."""
    if isinstance(startpoint, StartpointSpecific):
        _apply_specific(offset, shards, startpoint, shard_offsets)
        return
    if isinstance(startpoint, StartpointUpcoming):
        offset.finished = [shard.shard_id for shard in shards if shard.closed]
        offset.shards = {s.shard_id: {"start": _at(planned_at + 1), "active": True} for s in shards if not s.closed}
        return
    if isinstance(startpoint, StartpointOldest):
        begin = TRIM_HORIZON
    elif isinstance(startpoint, StartpointTimestamp):
        begin = _at(startpoint.timestamp_offset)
    else:
        raise StreamReadError(f"{startpoint.describe()} is not a startpoint a Kinesis stream's shards can take")
    offset.finished = []
    offset.shards = {shard.shard_id: {"start": begin, "active": False} for shard in shards}
    _activate(offset, shards)


def _apply_specific(
    offset: ShardOffset, shards: Sequence[ShardDescription], startpoint: StartpointSpecific, shard_offsets: ShardOffsets
) -> None:
    """Named shards start at their sequence numbers, their ancestors count as read, their descendants start
    over behind them; the other shards keep their positions."""
    try:
        named = shard_offsets(startpoint.specific_offset)
    except ValueError as error:
        raise StreamReadError(
            f"startpoint offset '{startpoint.specific_offset}': {error}; a Kinesis startpoint names "
            "shardId:sequenceNumber[,...]"
        ) from None
    by_id = {shard.shard_id: shard for shard in shards}
    unknown = sorted(set(named) - set(by_id))
    if unknown:
        raise StreamReadError(f"startpoint offset '{startpoint.specific_offset}' names shard(s) {unknown} not listed")
    ancestors = _lineage(named, by_id, lambda shard: list(shard.parents))
    descendants = _lineage(named, by_id, lambda shard: [s.shard_id for s in shards if shard.shard_id in s.parents])
    offset.finished = sorted(set(offset.finished) - set(named) - descendants | ancestors)
    for shard_id in ancestors:
        offset.shards.pop(shard_id, None)
    for shard_id in descendants:
        offset.shards[shard_id] = {"start": TRIM_HORIZON, "active": False}
    for shard_id, sequence in named.items():
        offset.shards[shard_id] = {
            "start": {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": sequence},
            "active": True,
        }


def _lineage(named: dict[str, str], by_id: dict[str, ShardDescription], step: Any) -> set[str]:
    """The shards reached from ``named`` by ``step`` (parents or children), ``named`` excluded."""
    seen: set[str] = set()
    pending = [related for shard_id in named for related in step(by_id[shard_id])]
    while pending:
        shard_id = pending.pop()
        if shard_id in seen or shard_id in named or shard_id not in by_id:
            continue
        seen.add(shard_id)
        pending.extend(step(by_id[shard_id]))
    return seen


def _listed(admin: ShardedSystemAdmin, stream: SystemStream) -> Sequence[ShardDescription]:
    shards = admin.shard_lineage(stream.stream)
    if shards is None:
        raise StreamReadError(f"stream '{stream}' does not exist in system '{stream.system}'")
    return parents_first(shards)


@contextmanager
def _admin(config: Settings, stream: SystemStream) -> Iterator[SystemAdmin]:
    """A started admin of the stream's system for one planning step, stopped after it."""
    with system_factory(config, stream.system).get_admin(stream.system, config) as admin:
        admin.start()
        yield admin


@contextmanager
def _sharded(config: Settings, stream: SystemStream) -> Iterator[ShardedSystemAdmin]:
    """:func:`_admin`, for a system whose admin reads shard by shard (an error naming the stream otherwise)."""
    with _admin(config, stream) as admin:
        yield sharded_admin(admin, stream)

"""Bounded reads of a stream whose partitions split and merge (Kinesis shards), for DataFrame reads: one
Spark partition per shard, planned and read through the admin's
:class:`~millstream.contracts.systems.ShardedSystemAdmin` capability, never by naming the system.

A job reads Kinesis through slots and leases, because shards come and go while it runs. A batch read
needs neither: it lists the shards once, at planning, and reads each from its start to the records that
arrived by the instant of planning (Kinesis has no call that gives a shard's newest sequence number;
finding it by reading would read every shard twice), ending at the shard's tip or, for a closed shard,
its end. Closed parents and their open children are both read, and
the Spark partitions are ordered parents before children, so rows collected in partition order keep
every partition key's records in the order it was written across splits and merges.

The ``partition`` column is the shard's number (``shardId-000000000003`` → 3), the ``offset`` column its
sequence number; range options name shards by that number and take sequence numbers as offsets
(``shardId:sequenceNumber`` is accepted too). Timestamps resolve with ``AT_TIMESTAMP`` (a start) or
each record's arrival time (an end).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

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
from millstream.contracts.systems import ShardDescription, ShardedSystemAdmin, SystemOperationError
from millstream.errors import StreamNotFoundError
from millstream.model import IncomingMessageEnvelope, SystemStream, SystemStreamPartition
from millstream.spark.sources.read_bounds import ReadBounds, StreamReadError

_SHARD_NUMBER = re.compile(r"(\d+)$")


@dataclass(frozen=True)
class ShardRange:
    """What one Spark partition reads of a shard: from ``start`` (GetShardIterator arguments) until the
    first record past any of its ends — ``planned_at_ms`` (records that arrived after the read was planned),
    ``end_sequence`` and ``end_timestamp_ms`` (exclusive) — or the shard's tip, or the end of a closed shard.
    ``start`` None: nothing to read."""

    ssp: SystemStreamPartition
    shard_id: str
    start: dict[str, Any] | None
    planned_at_ms: int
    end_sequence: str | None = None
    end_timestamp_ms: int | None = None

    def ends_before(self, sequence: str, arrival_ms: int) -> bool:
        """True when a record at ``sequence`` that arrived at ``arrival_ms`` lies past the range."""
        return (
            arrival_ms > self.planned_at_ms
            or (self.end_sequence is not None and int(sequence) >= int(self.end_sequence))
            or (self.end_timestamp_ms is not None and arrival_ms >= self.end_timestamp_ms)
        )


def shard_number(shard_id: str) -> int:
    """``shardId-000000000003`` → 3: the partition a shard's rows carry and range options name."""
    match = _SHARD_NUMBER.search(shard_id)
    if match is None:
        raise StreamReadError(f"shard '{shard_id}' has no number to serve as its partition")
    return int(match.group(1))


S = TypeVar("S", bound=ShardDescription)


def parents_first(shards: Sequence[S]) -> list[S]:
    """The shards in an order where every listed parent comes before its children (then by shard id)."""
    listed = {shard.shard_id for shard in shards}
    placed: set[str] = set()
    ordered: list[S] = []
    pending = sorted(shards, key=lambda shard: shard.shard_id)
    while pending:
        ready = [s for s in pending if all(p in placed or p not in listed for p in s.parents)] or pending[:1]
        for shard in ready:
            ordered.append(shard)
            placed.add(shard.shard_id)
        pending = [s for s in pending if s.shard_id not in placed]
    return ordered


def plan_shard_ranges(config: Settings, stream: SystemStream, bounds: ReadBounds) -> list[ShardRange]:
    """One range per shard the admin lists for ``stream`` (closed and open), parents before children."""
    with system_factory(config, stream.system).get_admin(stream.system, config) as admin:
        admin.start()
        listed = sharded_admin(admin, stream).shard_lineage(stream.stream)
        if listed is None:
            raise StreamNotFoundError(stream.system, stream.stream, "cannot read it as a DataFrame")
        shards = parents_first(listed)
        bounds.check_partitions(stream, {shard_number(shard.shard_id) for shard in shards})
        return [_plan_shard(stream, shard, bounds) for shard in shards]


def sharded_admin(admin: object, stream: SystemStream) -> ShardedSystemAdmin:
    """``admin`` as a :class:`ShardedSystemAdmin`, or an error naming the stream when its system's partitions
    come and go but its admin cannot read them shard by shard."""
    if not isinstance(admin, ShardedSystemAdmin):
        raise StreamReadError(
            f"stream '{stream}': system '{stream.system}' has partitions that come and go, and its admin "
            f"({type(admin).__name__}) cannot read them shard by shard (no ShardedSystemAdmin capability)"
        )
    return admin


def _plan_shard(stream: SystemStream, shard: ShardDescription, bounds: ReadBounds) -> ShardRange:
    number = shard_number(shard.shard_id)
    ssp = stream.partition(number)
    start = _start(ssp, shard.shard_id, bounds.start_of(number))
    end = bounds.end_of(number)
    if isinstance(end, StartpointOldest):
        start = None
    end_sequence = _sequence(ssp, shard.shard_id, end.specific_offset) if isinstance(end, StartpointSpecific) else None
    end_ms = end.timestamp_offset if isinstance(end, StartpointTimestamp) else None
    return ShardRange(ssp, shard.shard_id, start, now_ms(), end_sequence, end_ms)


def _start(ssp: SystemStreamPartition, shard_id: str, startpoint: Startpoint) -> dict[str, Any] | None:
    if isinstance(startpoint, StartpointOldest):
        return {"ShardIteratorType": "TRIM_HORIZON"}
    if isinstance(startpoint, StartpointUpcoming):
        return None
    if isinstance(startpoint, StartpointTimestamp):
        if startpoint.timestamp_offset > now_ms():
            return None  # Kinesis refuses a future AT_TIMESTAMP; no record is there yet
        return {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": startpoint.timestamp_offset}
    if isinstance(startpoint, StartpointSpecific):
        sequence = _sequence(ssp, shard_id, startpoint.specific_offset)
        return {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": sequence}
    raise StreamReadError(f"{ssp} (shard '{shard_id}'): {startpoint.describe()} cannot start a read of a shard")


def _sequence(ssp: SystemStreamPartition, shard_id: str, offset: str) -> str:
    """A sequence number from ``49590...`` or ``shardId-000000000003:49590...``."""
    named, _, sequence = offset.rpartition(":")
    if not sequence.isdigit() or (named and named != shard_id):
        raise StreamReadError(
            f"{ssp} (shard '{shard_id}'): offset '{offset}' is not a sequence number of this shard "
            f"(give the sequence number, or {shard_id}:<sequence number>)"
        )
    return sequence


def read_shard_range(config: Settings, shard: ShardRange) -> Iterator[list[IncomingMessageEnvelope]]:
    """The envelopes of ``shard`` in batches, undecoded, up to the first record past the range or the
    shard's tip (an empty answer with no lag: every record written until now was delivered)."""
    if shard.start is None:
        return
    ssp = shard.ssp
    with system_factory(config, ssp.system).get_admin(ssp.system, config) as admin:
        sharded = sharded_admin(admin, SystemStream(ssp.system, ssp.stream))
        try:
            yield from sharded.read_shard(ssp, shard.shard_id, shard.start, shard.ends_before)
        except SystemOperationError as error:
            raise StreamReadError(f"{ssp}: {error}") from None

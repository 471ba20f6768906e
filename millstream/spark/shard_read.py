"""Bounded reads of a Kinesis stream's shards, for DataFrame reads: one Spark partition per shard.

A job reads Kinesis through slots and leases, because shards come and go while it runs. A batch read
needs neither: it lists the shards once, at planning, and reads each with ``GetShardIterator`` /
``GetRecords`` from its start to an end fixed then — the newest record an open shard holds at
planning, or a closed shard's last record. Closed parents and their open children are both read, and
the Spark partitions are ordered parents before children, so rows collected in partition order keep
every partition key's records in the order it was written across splits and merges.

The ``partition`` column is the shard's number (``shardId-000000000003`` → 3), the ``offset`` column its
sequence number; range options name shards by that number and take sequence numbers as offsets
(``shardId:sequenceNumber`` is accepted too). Timestamps resolve with ``AT_TIMESTAMP`` (a start) or
each record's arrival time (an end).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from millstream.config import Config
from millstream.errors import StreamNotFoundError
from millstream.model import IncomingMessageEnvelope, SystemStream, SystemStreamPartition
from millstream.spark.read_bounds import ReadBounds, StreamReadError
from millstream.systems.registry import system_factory
from millstream.systems.startpoints import (
    Startpoint,
    StartpointOldest,
    StartpointSpecific,
    StartpointTimestamp,
    StartpointUpcoming,
    now_ms,
)

if TYPE_CHECKING:
    from millstream.systems.kinesis.admin import KinesisSystemAdmin
    from millstream.systems.kinesis.shards import Shard

_SHARD_NUMBER = re.compile(r"(\d+)$")
TIP_WAIT_S = 0.2
"""How long a read at the tip of an open shard waits before asking again (Kinesis: 5 GetRecords/s/shard)."""


@dataclass(frozen=True)
class ShardRange:
    """What one Spark partition reads of a shard: from ``start`` (GetShardIterator arguments) until the
    first record past any of the ends — ``last_sequence`` (inclusive: the newest at planning of an
    open shard), ``end_sequence`` and ``end_timestamp_ms`` (exclusive) — or the end of a closed shard."""

    ssp: SystemStreamPartition
    shard_id: str
    start: dict[str, Any] | None
    last_sequence: str | None
    end_sequence: str | None = None
    end_timestamp_ms: int | None = None

    def ends_before(self, sequence: str, arrival_ms: int) -> bool:
        """True when a record at ``sequence`` that arrived at ``arrival_ms`` lies past the range."""
        number = int(sequence)
        return (
            (self.last_sequence is not None and number > int(self.last_sequence))
            or (self.end_sequence is not None and number >= int(self.end_sequence))
            or (self.end_timestamp_ms is not None and arrival_ms >= self.end_timestamp_ms)
        )


def shard_number(shard_id: str) -> int:
    """``shardId-000000000003`` → 3: the partition a shard's rows carry and range options name."""
    match = _SHARD_NUMBER.search(shard_id)
    if match is None:
        raise StreamReadError(f"shard '{shard_id}' has no number to serve as its partition")
    return int(match.group(1))


def parents_first(shards: list[Shard]) -> list[Shard]:
    """The shards in an order where every listed parent comes before its children (then by shard id)."""
    listed = {shard.shard_id for shard in shards}
    placed: set[str] = set()
    ordered: list[Shard] = []
    pending = sorted(shards, key=lambda shard: shard.shard_id)
    while pending:
        ready = [s for s in pending if all(p in placed or p not in listed for p in s.parents)] or pending[:1]
        for shard in ready:
            ordered.append(shard)
            placed.add(shard.shard_id)
        pending = [s for s in pending if s.shard_id not in placed]
    return ordered


def plan_shard_ranges(config: Config, stream: SystemStream, bounds: ReadBounds) -> list[ShardRange]:
    """One range per shard Kinesis lists for ``stream`` (closed and open), parents before children."""
    with system_factory(config, stream.system).get_admin(stream.system, config) as admin:
        admin.start()
        kinesis = _kinesis_admin(admin, stream)
        if kinesis.describe_stream(stream.stream) is None:
            raise StreamNotFoundError(stream.system, stream.stream, "cannot read it as a DataFrame")
        shards = parents_first(kinesis.list_shards(stream.stream))
        bounds.check_partitions(stream, {shard_number(shard.shard_id) for shard in shards})
        return [_plan_shard(kinesis, stream, shard, bounds) for shard in shards]


def _kinesis_admin(admin: object, stream: SystemStream) -> KinesisSystemAdmin:
    from millstream.systems.kinesis.admin import KinesisSystemAdmin

    if not isinstance(admin, KinesisSystemAdmin):
        raise StreamReadError(
            f"stream '{stream}': system '{stream.system}' has partitions that come and go, and only Kinesis "
            "shards can be read as a DataFrame"
        )
    return admin


def _plan_shard(admin: KinesisSystemAdmin, stream: SystemStream, shard: Shard, bounds: ReadBounds) -> ShardRange:
    number = shard_number(shard.shard_id)
    ssp = stream.partition(number)
    start = _start(ssp, shard.shard_id, bounds.start_of(number))
    end = bounds.end_of(number)
    last = None
    if not shard.closed and start is not None:
        last = admin.shard_positions(stream.stream, shard.shard_id).newest_sequence_number
        if last is None:
            start = None
    if isinstance(end, StartpointOldest):
        start = None
    end_sequence = _sequence(ssp, shard.shard_id, end.specific_offset) if isinstance(end, StartpointSpecific) else None
    end_ms = end.timestamp_offset if isinstance(end, StartpointTimestamp) else None
    return ShardRange(ssp, shard.shard_id, start, last, end_sequence, end_ms)


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


def read_shard_range(config: Config, shard: ShardRange, idle_timeout: float) -> Iterator[list[IncomingMessageEnvelope]]:
    """The envelopes of ``shard`` in batches, undecoded; raises if an open shard reaches its tip for
    ``idle_timeout`` seconds before its range ends (its records expired), rather than returning part of it."""
    if shard.start is None:
        return
    ssp = shard.ssp
    with system_factory(config, ssp.system).get_admin(ssp.system, config) as admin:
        kinesis = _kinesis_admin(admin, SystemStream(ssp.system, ssp.stream))
        reached: str | None = None
        last_data = time.monotonic()
        for response in _responses(kinesis, shard):
            batch, done = _envelopes(shard, response.get("Records", []))
            if batch:
                reached, last_data = batch[-1].offset, time.monotonic()
                yield batch
            if done or (shard.last_sequence is not None and reached == shard.last_sequence):
                return
            if not batch and shard.last_sequence is not None and response.get("MillisBehindLatest", 0) == 0:
                if _past_tip(shard, reached, time.monotonic() - last_data, idle_timeout):
                    return
                time.sleep(TIP_WAIT_S)


def _responses(kinesis: KinesisSystemAdmin, shard: ShardRange) -> Iterator[dict[str, Any]]:
    """``GetRecords`` answers from the range's start to the end of the shard; Kinesis's refusals (an
    expired shard, a sequence number it does not hold) as errors naming the shard."""
    from botocore.exceptions import ClientError

    assert shard.start is not None
    ssp, start = shard.ssp, dict(shard.start)
    if "Timestamp" in start:
        start["Timestamp"] = datetime.fromtimestamp(start["Timestamp"] / 1000, tz=UTC)
    try:
        iterator = kinesis.clients.call(
            "GetShardIterator",
            kinesis.metrics,
            stream=ssp.stream,
            StreamName=ssp.stream,
            ShardId=shard.shard_id,
            **start,
        )["ShardIterator"]
        while iterator is not None:
            response = kinesis.clients.call(
                "GetRecords", kinesis.metrics, stream=ssp.stream, ShardIterator=iterator, Limit=10_000
            )
            yield response
            iterator = response.get("NextShardIterator")
    except ClientError as error:
        raise StreamReadError(
            f"{ssp} (shard '{shard.shard_id}'): Kinesis refused the read from {_describe(shard.start)}: {error}"
        ) from None


def _describe(start: dict[str, Any]) -> str:
    position = start["ShardIteratorType"]
    detail = start.get("StartingSequenceNumber") or start.get("Timestamp")
    return f"{position} {detail}" if detail is not None else position


def _envelopes(shard: ShardRange, records: list[dict[str, Any]]) -> tuple[list[IncomingMessageEnvelope], bool]:
    """The records inside the range as envelopes (as a job's consumer builds them), and whether it ended."""
    from millstream.systems.kinesis.slots import SEQUENCE_NUMBER_HEADER, SHARD_ID_HEADER, arrival_millis

    shard_header = shard.shard_id.encode()
    envelopes: list[IncomingMessageEnvelope] = []
    for record in records:
        sequence, arrival = record["SequenceNumber"], arrival_millis(record.get("ApproximateArrivalTimestamp"))
        if shard.ends_before(sequence, arrival):
            return envelopes, True
        key, data = record.get("PartitionKey"), record["Data"]
        headers = {SHARD_ID_HEADER: shard_header, SEQUENCE_NUMBER_HEADER: sequence.encode()}
        envelopes.append(
            IncomingMessageEnvelope(shard.ssp, sequence, key and key.encode(), data, arrival, headers, len(data))
        )
    return envelopes, False


def _past_tip(shard: ShardRange, reached: str | None, idle_s: float, idle_timeout: float) -> bool:
    """At the tip of an open shard before the last record planned: True when a timestamp start lies past
    that record (nothing to read); an error naming the shard when records were lost, rather than part of
    the range; False to ask again (an empty answer right after GetShardIterator is no proof)."""
    assert shard.start is not None
    if reached is None and shard.start["ShardIteratorType"] == "AT_TIMESTAMP":
        return True
    if reached is None and idle_s <= idle_timeout:
        return False
    raise StreamReadError(
        f"{shard.ssp} (shard '{shard.shard_id}'): the shard ends at sequence number {reached}, before the last "
        f"record planned, {shard.last_sequence} (its records may have expired)"
    )

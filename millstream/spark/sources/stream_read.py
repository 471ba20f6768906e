"""Bounded reads of a stream's partitions with millstream's own admins and consumers, for DataFrame reads.

A batch read must end, so every partition's range is fixed when the read is planned: from a starting
offset (inclusive) to either the newest offset present at planning (inclusive) or a given ending offset
(exclusive, as Spark's Kafka source reads ``endingOffsets``). Reading goes through the system registry,
so it works for every system millstream has; it never stops short silently: a partition that stops
delivering before its range ends is an error naming it and the offset reached.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.contracts.startpoints import Startpoint, StartpointUpcoming
from millstream.contracts.systems import SystemAdmin, SystemStreamPartitionMetadata
from millstream.errors import MillstreamError, StreamNotFoundError
from millstream.model import IncomingMessageEnvelope, SystemStream, SystemStreamPartition
from millstream.spark.sources.read_bounds import ReadBounds, StreamReadError


@dataclass(frozen=True)
class OffsetRange:
    """What one Spark partition reads: ``start`` inclusive to ``end``, inclusive when ``end_inclusive``.

    ``start`` None means the partition holds nothing to read."""

    ssp: SystemStreamPartition
    start: str | None
    end: str | None
    end_inclusive: bool


def plan_ranges(
    config: Settings, stream: SystemStream, bounds: ReadBounds | None = None, max_records: int | None = None
) -> list[OffsetRange]:
    """One range per partition of ``stream`` (several when ``max_records`` splits a long one), from each
    partition's start in ``bounds`` to its end, the newest offsets as of now by default."""
    bounds = bounds or ReadBounds()
    with system_factory(config, stream.system).get_admin(stream.system, config) as admin:
        admin.start()
        if not admin.partitions_are_fixed:
            raise StreamReadError(
                f"stream '{stream}': system '{stream.system}' has partitions that come and go (shards); "
                "plan its read by shard instead"
            )
        metadata = admin.get_system_stream_metadata([stream.stream]).get(stream.stream)
        if metadata is None:
            raise StreamNotFoundError(stream.system, stream.stream, "cannot read it as a DataFrame")
        bounds.check_partitions(stream, set(metadata.partitions))
        ranges = [
            _plan_partition(admin, stream.partition(p), info, bounds.start_of(p), bounds.end_of(p))
            for p, info in sorted(metadata.partitions.items())
        ]
    return [piece for whole in ranges for piece in split_range(whole, max_records)]


def _plan_partition(
    admin: SystemAdmin,
    ssp: SystemStreamPartition,
    info: SystemStreamPartitionMetadata,
    start: Startpoint,
    end: Startpoint,
) -> OffsetRange:
    if isinstance(end, StartpointUpcoming):
        if info.newest_offset is None:
            return OffsetRange(ssp, None, None, True)
        end_offset, inclusive = info.newest_offset, True
    else:
        end_offset, inclusive = _resolve(admin, ssp, end, "end"), False
    start_offset = _resolve(admin, ssp, start, "start")
    order = admin.offset_comparator(start_offset, end_offset)
    if order is None:
        raise StreamReadError(f"{ssp}: offsets '{start_offset}' and '{end_offset}' cannot be compared")
    empty = order > 0 or (order == 0 and not inclusive)
    return OffsetRange(ssp, None if empty else start_offset, end_offset, inclusive)


def _resolve(admin: SystemAdmin, ssp: SystemStreamPartition, startpoint: Startpoint, which: str) -> str:
    try:
        return admin.resolve_startpoint(ssp, startpoint)
    except MillstreamError as error:
        raise StreamReadError(f"{ssp}: cannot resolve the read's {which} ({startpoint.describe()}): {error}") from None


def split_range(offsets: OffsetRange, max_records: int | None) -> list[OffsetRange]:
    """``offsets`` cut into ranges of at most ``max_records`` offsets, so one long partition is read by
    several Spark tasks; only where offsets are integers (log, Kafka), else the range whole."""
    start, end = offsets.start, offsets.end
    if max_records is None or start is None or end is None or not (start.isdigit() and end.isdigit()):
        return [offsets]
    first, stop = int(start), int(end) + (1 if offsets.end_inclusive else 0)
    cuts = list(range(first, stop, max_records))
    pieces = [OffsetRange(offsets.ssp, str(cut), str(cut + max_records), False) for cut in cuts[:-1]]
    return [*pieces, OffsetRange(offsets.ssp, str(cuts[-1]), end, offsets.end_inclusive)]


def read_range(config: Settings, offsets: OffsetRange, idle_timeout: float) -> Iterator[list[IncomingMessageEnvelope]]:
    """The envelopes of ``offsets`` in batches, undecoded; raises if the partition goes quiet for
    ``idle_timeout`` seconds before its range ends, rather than returning part of it."""
    if offsets.start is None or offsets.end is None:
        return
    ssp, end = offsets.ssp, offsets.end
    factory = system_factory(config, ssp.system)
    with factory.get_admin(ssp.system, config) as admin, factory.get_consumer(ssp.system, config) as consumer:
        admin.start()
        consumer.register(ssp, offsets.start)
        consumer.start()
        reached, last_data = offsets.start, time.monotonic()
        while True:
            batch = consumer.poll({ssp}, 0.2).get(ssp, [])
            kept, done = _within(admin, batch, offsets)
            if kept:
                reached, last_data = kept[-1].offset, time.monotonic()
                yield kept
            if done or _position_past(admin, consumer.position(ssp), offsets):
                return
            if not batch and time.monotonic() - last_data > idle_timeout:
                raise StreamReadError(
                    f"{ssp}: no record for {idle_timeout:.0f}s after offset '{reached}', before the end of the "
                    f"read at '{end}' (the records may have expired; raise option 'idleTimeoutMs' to wait longer)"
                )


def _within(
    admin: SystemAdmin, batch: list[IncomingMessageEnvelope], offsets: OffsetRange
) -> tuple[list[IncomingMessageEnvelope], bool]:
    """The envelopes of ``batch`` inside the range, and whether the range is complete; one comparison
    when the batch's last envelope lies inside, as all but a range's last batch do."""
    assert offsets.end is not None
    if batch and not batch[-1].is_end_of_stream:
        order = admin.offset_comparator(batch[-1].offset, offsets.end)
        if order is not None and (order < 0 or (order == 0 and offsets.end_inclusive)):
            return batch, order == 0
    for index, envelope in enumerate(batch):
        if envelope.is_end_of_stream:
            return batch[:index], True
        order = admin.offset_comparator(envelope.offset, offsets.end)
        if order is None:
            raise StreamReadError(f"{offsets.ssp}: offset '{envelope.offset}' cannot be compared with '{offsets.end}'")
        if order > 0 or (order == 0 and not offsets.end_inclusive):
            return batch[:index], True
        if order == 0:
            return batch[: index + 1], True
    return batch, False


def _position_past(admin: SystemAdmin, position: str | None, offsets: OffsetRange) -> bool:
    """True once the consumer moved past the range's end without a record there (Kafka's transaction markers)."""
    if position is None or offsets.end is None:
        return False
    order = admin.offset_comparator(position, offsets.end)
    return order is not None and (order > 0 or (order == 0 and not offsets.end_inclusive))

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

import orjson

from millstream.config import Config
from millstream.errors import MillstreamError, StreamNotFoundError
from millstream.model import IncomingMessageEnvelope, SystemStream, SystemStreamPartition
from millstream.systems.base import SystemAdmin, SystemStreamPartitionMetadata
from millstream.systems.registry import system_factory
from millstream.systems.startpoints import StartpointOldest, StartpointSpecific, StartpointUpcoming

OLDEST = "oldest"
UPCOMING = "upcoming"
NEWEST = "newest"
STARTING_WORDS = {OLDEST: StartpointOldest(), UPCOMING: StartpointUpcoming(), "latest": StartpointUpcoming()}
ENDING_WORDS = {NEWEST, "latest"}


class StreamReadError(MillstreamError):
    """A DataFrame read of a stream cannot be planned or completed; the message names stream and partition."""


@dataclass(frozen=True)
class OffsetRange:
    """What one Spark partition reads: ``start`` inclusive to ``end``, inclusive when ``end_inclusive``.

    ``start`` None means the partition holds nothing to read."""

    ssp: SystemStreamPartition
    start: str | None
    end: str | None
    end_inclusive: bool


def parse_offsets(text: str | None, option: str) -> dict[int, str]:
    """``{"0": "5", "1": "oldest"}`` → ``{0: "5", 1: "oldest"}``, with an error naming the option."""
    if not text:
        return {}
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise StreamReadError(f"option '{option}' is not JSON ({error}): {text!r}") from None
    if not isinstance(parsed, dict) or not all(isinstance(key, str) and key.isdigit() for key in parsed):
        raise StreamReadError(f'option \'{option}\' must map partition numbers to offsets, e.g. {{"0": "5"}}')
    return {int(key): str(value) for key, value in parsed.items()}


def plan_ranges(config: Config, stream: SystemStream, starting: str | None, ending: str | None) -> list[OffsetRange]:
    """One range per partition of ``stream``, with the newest offsets as of now where none is given."""
    starts, ends = parse_offsets(starting, "startingOffsets"), parse_offsets(ending, "endingOffsets")
    with system_factory(config, stream.system).get_admin(stream.system, config) as admin:
        admin.start()
        if not admin.partitions_are_fixed:
            raise StreamReadError(
                f"stream '{stream}': system '{stream.system}' has partitions that come and go (shards), which "
                "DataFrame reads do not support yet; read it with a job instead"
            )
        metadata = admin.get_system_stream_metadata([stream.stream]).get(stream.stream)
        if metadata is None:
            raise StreamNotFoundError(stream.system, stream.stream, "cannot read it as a DataFrame")
        for option, given in (("startingOffsets", starts), ("endingOffsets", ends)):
            unknown = sorted(set(given) - set(metadata.partitions))
            if unknown:
                raise StreamReadError(
                    f"option '{option}' names partition(s) {unknown} of stream '{stream}', "
                    f"which has partitions {sorted(metadata.partitions)}"
                )
        return [
            _plan_partition(admin, stream.partition(p), info, starts.get(p, OLDEST), ends.get(p, NEWEST))
            for p, info in sorted(metadata.partitions.items())
        ]


def _plan_partition(
    admin: SystemAdmin, ssp: SystemStreamPartition, info: SystemStreamPartitionMetadata, start: str, end: str
) -> OffsetRange:
    if end.lower() in ENDING_WORDS:
        if info.newest_offset is None:
            return OffsetRange(ssp, None, None, True)
        end_offset, inclusive = info.newest_offset, True
    else:
        end_offset, inclusive = end, False
    startpoint = STARTING_WORDS.get(start.lower(), StartpointSpecific(start))
    start_offset = admin.resolve_startpoint(ssp, startpoint)
    order = admin.offset_comparator(start_offset, end_offset)
    if order is None:
        raise StreamReadError(f"{ssp}: offsets '{start_offset}' and '{end_offset}' cannot be compared")
    empty = order > 0 or (order == 0 and not inclusive)
    return OffsetRange(ssp, None if empty else start_offset, end_offset, inclusive)


def read_range(config: Config, offsets: OffsetRange, idle_timeout: float) -> Iterator[list[IncomingMessageEnvelope]]:
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
    """The envelopes of ``batch`` inside the range, and whether the range is complete."""
    assert offsets.end is not None
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

"""Which partition of a log stream an outgoing envelope goes to.

A pinned ``partition`` wins; else ``crc32`` of the partition key (or the key) modulo the partition
count, so the same key bytes land in the same partition in every process and every run; keyless
envelopes are spread round-robin.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from itertools import cycle, islice

from millstream.embedded.log.errors import LogSystemError
from millstream.model import OutgoingMessageEnvelope


def partition_for_key(key: bytes | bytearray | memoryview, partition_count: int) -> int:
    """Stable across processes and Python versions (unlike ``hash``)."""
    return zlib.crc32(key) % partition_count


class Partitioner:
    """Chooses partitions for one producer; keeps a round-robin position per stream. Not thread-safe."""

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next: dict[str, Iterator[int]] = {}

    def partition(self, envelope: OutgoingMessageEnvelope, partition_count: int) -> int:
        stream = envelope.system_stream.stream
        pinned = envelope.partition
        if pinned is not None:
            if not 0 <= pinned < partition_count:
                raise LogSystemError(
                    f"log stream '{stream}' has partitions 0..{partition_count - 1}; "
                    f"an envelope asked for partition {pinned}"
                )
            return pinned
        key = envelope.partition_key if envelope.partition_key is not None else envelope.key
        if key is not None:
            try:
                return zlib.crc32(key) % partition_count
            except TypeError:
                raise LogSystemError(
                    f"log stream '{stream}': the partition key must be bytes (serialized), got {type(key).__name__}"
                ) from None
        positions = self._next.get(stream)
        if positions is None:
            positions = self._next[stream] = round_robin(partition_count)
        return next(positions) % partition_count


def round_robin(partition_count: int) -> Iterator[int]:
    """``0, 1, ..., partition_count - 1`` over and over, from a random partition on.

    A random start keeps many short-lived producers from all favouring partition 0.
    """
    start = random.randrange(partition_count)
    return islice(cycle(range(partition_count)), start, None)

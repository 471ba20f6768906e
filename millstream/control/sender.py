"""Where a producing task sends its control messages: every partition, or Samza's aggregate partition.

*Broadcast* (the default, as the proposal describes): each producing task writes each control message
to every partition of the intermediate stream. ``n`` producers and ``m`` partitions cost ``n * m``
messages per watermark, and each message follows, in its partition, every user message its producer
wrote there before — so a consumer that reconciled end-of-stream has provably read everything.

*Aggregate* (``app.control.aggregation``, Samza's two-phase ``ControlMessageSender``): each producer
writes one message, to the aggregate partition ``crc32(stream) % m``; the task consuming that partition
reconciles and re-broadcasts the result without a task name to the other partitions: ``n + m - 1``
messages. A producer's user messages to *other* partitions are not ordered with its control message, so
the producer sends it only after a flush made its earlier output durable (the task defers it to its next
flush: its timer flushes the task's output — no commit — or a commit comes first,
``CheckpointListener.before_checkpoint``): fewer messages, for about one timer interval of delay. With its
container's ``WatermarkCombiner`` (``combining``) a task's watermarks take the same route as one record per
container: ``c + m - 1`` messages for ``c`` containers.
"""

from __future__ import annotations

import zlib


def aggregate_partition(stream: str, partition_count: int) -> int:
    """The partition that aggregates a stream's control messages; stable across processes."""
    return zlib.crc32(stream.encode()) % partition_count


def control_targets(stream: str, partition_count: int, aggregate: bool) -> list[int]:
    """The partitions a producing task sends one control message to."""
    if aggregate:
        return [aggregate_partition(stream, partition_count)]
    return list(range(partition_count))


def rebroadcast_targets(stream: str, partition_count: int) -> list[int]:
    """Where the aggregating task copies a reconciled result: every partition but its own."""
    own = aggregate_partition(stream, partition_count)
    return [partition for partition in range(partition_count) if partition != own]

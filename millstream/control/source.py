"""Watermarks of source partitions, from the timestamps of their messages.

Bounded out-of-orderness (Flink's ``forBoundedOutOfOrderness``, what Samza leaves to the user): a
partition's watermark is the largest event time seen minus the allowed out-of-orderness, so a message
up to that much older than the newest one is still on time. Watermarks are computed when asked —
periodically, by the task's timer — not per message, which keeps the cost per message at one
comparison. A partition that reached end-of-stream has ``MAX_WATERMARK``; one that has shown no
message yet holds every minimum back (an idle unbounded source stalls event time, as in Samza). A
drained partition has ``MAX_WATERMARK`` too, for this run only: drain is not part of the snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from millstream.control.messages import MAX_WATERMARK, MIN_WATERMARK
from millstream.model import SystemStreamPartition


class SourceWatermarks:
    """Event-time progress of one task's partitions of one source stream."""

    __slots__ = ("drained", "ended", "max_out_of_orderness_ms", "max_timestamps")

    def __init__(self, max_out_of_orderness_ms: int, ssps: Iterable[SystemStreamPartition] = ()) -> None:
        self.max_out_of_orderness_ms = max_out_of_orderness_ms
        self.max_timestamps: dict[SystemStreamPartition, int] = dict.fromkeys(ssps, MIN_WATERMARK)
        self.ended: set[SystemStreamPartition] = set()
        self.drained: set[SystemStreamPartition] = set()

    def observe(self, ssp: SystemStreamPartition, timestamp: int) -> None:
        if timestamp > self.max_timestamps.get(ssp, MIN_WATERMARK):
            self.max_timestamps[ssp] = timestamp

    def end(self, ssp: SystemStreamPartition) -> None:
        self.ended.add(ssp)

    def drain(self, ssp: SystemStreamPartition) -> None:
        self.drained.add(ssp)

    def watermark(self, ssp: SystemStreamPartition) -> int:
        if ssp in self.ended or ssp in self.drained:
            return MAX_WATERMARK
        newest = self.max_timestamps.get(ssp, MIN_WATERMARK)
        return MIN_WATERMARK if newest == MIN_WATERMARK else newest - self.max_out_of_orderness_ms

    def stream_watermark(self) -> int:
        """The minimum over this task's partitions of the stream."""
        return min((self.watermark(ssp) for ssp in self.max_timestamps), default=MAX_WATERMARK)

    def snapshot(self) -> dict[str, Any]:
        return {
            "max": {ssp.key(): ts for ssp, ts in sorted(self.max_timestamps.items())},
            "ended": sorted(ssp.key() for ssp in self.ended),
        }

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        for key, ts in snapshot.get("max", {}).items():
            ssp = SystemStreamPartition.parse_key(key)
            if ssp in self.max_timestamps:
                self.observe(ssp, int(ts))
        for key in snapshot.get("ended", ()):
            ssp = SystemStreamPartition.parse_key(key)
            if ssp in self.max_timestamps:
                self.ended.add(ssp)

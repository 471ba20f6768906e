"""Watermarks of source partitions, from the timestamps of their messages.

Bounded out-of-orderness (Flink's ``forBoundedOutOfOrderness``, what Samza leaves to the user): a
partition's watermark is the largest event time seen minus the allowed out-of-orderness, so a message
up to that much older than the newest one is still on time. Watermarks are computed when asked —
periodically, by the task's timer — not per message, which keeps the cost per message at one
comparison. A partition that reached end-of-stream has ``MAX_WATERMARK``; one that has shown no
message yet holds every minimum back (an idle unbounded source stalls event time, as in Samza). A
drained partition has ``MAX_WATERMARK`` too, for this run only: drain is not part of the snapshot.

The one exception to "on the timer" is a *window boundary* (``boundary``): when a partition's watermark
passes a multiple of the application's boundary period, ``observe`` says so (one more comparison, only
when the partition's newest event time moved), and the stream's watermark is computed at once
(``boundary_advance``): if it passed a boundary since the last advance, it goes out now, so a window
fires when its end is passed, not at the next tick. The stream's watermark can only pass a boundary when
one of its partitions does (or ends), so nothing is missed between ticks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from millstream.control.boundary import NO_BOUNDARY, crosses
from millstream.control.messages import MAX_WATERMARK, MIN_WATERMARK
from millstream.model import SystemStreamPartition


class SourceWatermarks:
    """Event-time progress of one task's partitions of one source stream."""

    __slots__ = ("advanced", "boundary_ms", "drained", "ended", "max_out_of_orderness_ms", "max_timestamps")

    def __init__(
        self,
        max_out_of_orderness_ms: int,
        ssps: Iterable[SystemStreamPartition] = (),
        boundary_ms: int = NO_BOUNDARY,
    ) -> None:
        self.max_out_of_orderness_ms = max_out_of_orderness_ms
        self.boundary_ms = boundary_ms
        self.max_timestamps: dict[SystemStreamPartition, int] = dict.fromkeys(ssps, MIN_WATERMARK)
        self.ended: set[SystemStreamPartition] = set()
        self.drained: set[SystemStreamPartition] = set()
        self.advanced = MIN_WATERMARK
        """The stream watermark last handed out (``advance``, ``boundary_advance``); not persisted: after a
        restart the first boundary passed goes out once more, which changes nothing downstream."""

    def observe(self, ssp: SystemStreamPartition, timestamp: int) -> bool:
        """Record an event time; True when the partition's watermark passed a window boundary (then ask
        ``boundary_advance``)."""
        newest = self.max_timestamps.get(ssp, MIN_WATERMARK)
        if timestamp <= newest:
            return False
        self.max_timestamps[ssp] = timestamp
        boundary = self.boundary_ms
        if not boundary:
            return False
        ooo = self.max_out_of_orderness_ms
        return newest == MIN_WATERMARK or crosses(newest - ooo, timestamp - ooo, boundary)

    def advance(self) -> int:
        """The stream's watermark, counted as handed out (the timer's advance)."""
        watermark = self.stream_watermark()
        self.advanced = max(self.advanced, watermark)
        return watermark

    def boundary_advance(self) -> int | None:
        """The stream's watermark if it passed a window boundary since the last one handed out, else None."""
        watermark = self.stream_watermark()
        if not crosses(self.advanced, watermark, self.boundary_ms):
            return None
        self.advanced = watermark
        return watermark

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

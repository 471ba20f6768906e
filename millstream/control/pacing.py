"""How often a task sends watermarks of a stream: at most once per interval, and only when they advanced.

A watermark sent to an intermediate stream costs one record per partition (broadcast) or per partition
plus producer (aggregate), so what it costs must be bounded by time, not by how often the task's
watermark moves (Flink's auto-watermark interval). A task's output watermark moves on the timer for a
source, but on control messages for a stream fed by another ``partition_by`` — as often as its producers'
watermarks arrive. The pacer lets the first advance of an interval through at once (no latency added to a
watermark that moves once per interval anyway), holds later ones back and keeps only the newest, which the
next timer call releases once the interval has passed. Watermarks only advance, so dropping the
intermediate ones loses nothing: the newest one says everything they said.

*Window boundaries* (``boundary``): a watermark that passed a multiple of the application's boundary period
— a window end — goes out at once even within the interval, so a window fires milliseconds after the
watermark passed it rather than up to an interval later. Such an early send is allowed once per interval
per key (a second boundary within the same interval waits for the timer like any advance), so a key
sends at most two watermarks per interval whatever the windows' sizes, and in a steady stream whose
windows are longer than the interval every boundary goes out at once: one extra record per boundary per
partition at most, and the cost stays bounded by time (a replay racing through event time included).

End-of-stream and drain are not paced: they are sent once per producer and stream, and they supersede a
watermark held back (``drop``). The held-back watermarks are part of the task's snapshot, so a restart
sends them (a watermark must not be lost, or downstream windows would wait for the next advance, which a
quiet input may never bring).

Pure bookkeeping over an injected clock (seconds), as the rest of the protocol.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import Generic, TypeVar

from millstream.control.boundary import NO_BOUNDARY, crosses
from millstream.control.messages import MIN_WATERMARK

K = TypeVar("K", bound=Hashable)

JITTER = 0.1
"""The part of an interval that may be missing when it counts as passed. Source watermarks advance on the
task's timer, which calls each task of a container in turn, so the time between two of one task's calls
moves a little around the interval: without this, a call that came a few milliseconds early would hold
that tick's watermark back until the next one, a whole interval late."""


class WatermarkPacer(Generic[K]):
    """Per key (a produced stream, or a stream an aggregating task re-broadcasts): when the last watermark
    went out, which one it was, and the newest one held back. ``interval_ms`` 0 lets every advance
    through; otherwise two watermarks of a key are at least 90 % of it apart (``JITTER``), except that one
    watermark per interval that passed a window boundary (a multiple of ``boundary_ms``; 0: none) goes out
    at once."""

    __slots__ = ("boundary_ms", "interval", "last_boundary", "last_mark", "last_sent", "pending")

    def __init__(self, interval_ms: int, boundary_ms: int = NO_BOUNDARY) -> None:
        if interval_ms < 0:
            raise ValueError(f"a watermark interval cannot be negative: {interval_ms} ms")
        if boundary_ms < 0:
            raise ValueError(f"a window boundary period cannot be negative: {boundary_ms} ms")
        self.interval = interval_ms / 1000 * (1 - JITTER)
        """The least time between two watermarks of a key, the timer's jitter allowed for."""
        self.boundary_ms = boundary_ms
        self.last_sent: dict[K, float] = {}
        self.last_mark: dict[K, int] = {}
        """The last watermark sent per key: a boundary is passed relative to it."""
        self.last_boundary: dict[K, float] = {}
        """When a key last sent early for a boundary: once per interval."""
        self.pending: dict[K, int] = {}
        """Watermarks held back, newest per key: sent by ``due`` once the interval has passed."""

    def offer(self, key: K, watermark: int, now: float) -> bool:
        """Whether ``watermark`` goes out now; if not, it is held back (replacing an older one)."""
        last = self.last_sent.get(key)
        if last is None or now - last >= self.interval:
            self._sent(key, watermark, now)
            return True
        early = self.last_boundary.get(key)
        if crosses(self.last_mark.get(key, MIN_WATERMARK), watermark, self.boundary_ms) and (
            early is None or now - early >= self.interval
        ):
            self.last_boundary[key] = now
            self._sent(key, watermark, now)
            return True
        if watermark > self.pending.get(key, watermark - 1):
            self.pending[key] = watermark
        return False

    def _sent(self, key: K, watermark: int, now: float) -> None:
        self.last_sent[key] = now
        self.last_mark[key] = max(watermark, self.last_mark.get(key, watermark))
        self.pending.pop(key, None)

    def due(self, now: float) -> Iterator[tuple[K, int]]:
        """The held-back watermarks whose interval has passed; each is then counted as sent now."""
        for key in [key for key in self.pending if now - self.last_sent.get(key, now) >= self.interval]:
            watermark = self.pending[key]
            self._sent(key, watermark, now)
            yield key, watermark

    def drop(self, key: K) -> None:
        """End-of-stream or drain went out for ``key``: a watermark held back says nothing more."""
        self.pending.pop(key, None)

    def restore(self, pending: Mapping[K, int]) -> None:
        """Held-back watermarks of a snapshot: sent by ``take_all`` at the first call after a restart."""
        self.pending = dict(pending)
        self.last_sent.clear()
        self.last_mark.clear()
        self.last_boundary.clear()

    def take_all(self, now: float) -> dict[K, int]:
        """Everything held back, counted as sent now (a restart sends it at once)."""
        taken, self.pending = self.pending, {}
        self.last_sent.update(dict.fromkeys(taken, now))
        self.last_mark.update(taken)
        return taken

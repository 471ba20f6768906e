"""How often a task sends watermarks of a stream: at most once per interval, and only when they advanced.

A watermark sent to an intermediate stream costs one record per partition (broadcast) or per partition
plus producer (aggregate), so what it costs must be bounded by time, not by how often the task's
watermark moves (Flink's auto-watermark interval). A task's output watermark moves on the timer for a
source, but on control messages for a stream fed by another ``partition_by`` — as often as its producers'
watermarks arrive. The pacer lets the first advance of an interval through at once (no latency added to a
watermark that moves once per interval anyway), holds later ones back and keeps only the newest, which the
next timer call releases once the interval has passed. Watermarks only advance, so dropping the
intermediate ones loses nothing: the newest one says everything they said.

End-of-stream and drain are not paced: they are sent once per producer and stream, and they supersede a
watermark held back (``drop``). The held-back watermarks are part of the task's snapshot, so a restart
sends them (a watermark must not be lost, or downstream windows would wait for the next advance, which a
quiet input may never bring).

Pure bookkeeping over an injected clock (seconds), as the rest of the protocol.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

JITTER = 0.1
"""The part of an interval that may be missing when it counts as passed. Source watermarks advance on the
task's timer, which calls each task of a container in turn, so the time between two of one task's calls
moves a little around the interval: without this, a call that came a few milliseconds early would hold
that tick's watermark back until the next one, a whole interval late."""


class WatermarkPacer(Generic[K]):
    """Per key (a produced stream, or a stream an aggregating task re-broadcasts): when the last watermark
    went out and the newest one held back. ``interval_ms`` 0 lets every advance through; otherwise two
    watermarks of a key are at least 90 % of it apart (``JITTER``)."""

    __slots__ = ("interval", "last_sent", "pending")

    def __init__(self, interval_ms: int) -> None:
        if interval_ms < 0:
            raise ValueError(f"a watermark interval cannot be negative: {interval_ms} ms")
        self.interval = interval_ms / 1000 * (1 - JITTER)
        """The least time between two watermarks of a key, the timer's jitter allowed for."""
        self.last_sent: dict[K, float] = {}
        self.pending: dict[K, int] = {}
        """Watermarks held back, newest per key: sent by ``due`` once the interval has passed."""

    def offer(self, key: K, watermark: int, now: float) -> bool:
        """Whether ``watermark`` goes out now; if not, it is held back (replacing an older one)."""
        last = self.last_sent.get(key)
        if last is None or now - last >= self.interval:
            self.last_sent[key] = now
            self.pending.pop(key, None)
            return True
        if watermark > self.pending.get(key, watermark - 1):
            self.pending[key] = watermark
        return False

    def due(self, now: float) -> Iterator[tuple[K, int]]:
        """The held-back watermarks whose interval has passed; each is then counted as sent now."""
        for key in [key for key in self.pending if now - self.last_sent.get(key, now) >= self.interval]:
            self.last_sent[key] = now
            yield key, self.pending.pop(key)

    def drop(self, key: K) -> None:
        """End-of-stream or drain went out for ``key``: a watermark held back says nothing more."""
        self.pending.pop(key, None)

    def restore(self, pending: Mapping[K, int]) -> None:
        """Held-back watermarks of a snapshot: sent by ``take_all`` at the first call after a restart."""
        self.pending = dict(pending)
        self.last_sent.clear()

    def take_all(self, now: float) -> dict[K, int]:
        """Everything held back, counted as sent now (a restart sends it at once)."""
        taken, self.pending = self.pending, {}
        self.last_sent.update(dict.fromkeys(taken, now))
        return taken

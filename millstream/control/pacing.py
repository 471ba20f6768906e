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
watermark passed it rather than up to an interval later, without raising what watermarks cost. Per key, a
token bucket refilled with one send per interval and holding two: every send takes one; an ordinary advance
goes out only when the bucket is full (once per interval, as before), a boundary one whenever a send is
left. In a steady stream whose windows are longer than the interval every boundary goes out at once (the
ordinary send after it waits up to one interval more); when boundaries come faster than the interval — a job
catching up races through event time, or windows shorter than the interval — they take every send, and
ordinary advances none. Either way a key sends at most ``T / interval + 2`` watermarks over any time ``T``:
the bound on control traffic (issue 36) is the one without boundaries, plus one.

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


BURST = 2
"""Sends a key's bucket holds: one for the interval's ordinary advance, one for a window boundary."""


class WatermarkPacer(Generic[K]):
    """Per key (a produced stream, or a stream an aggregating task re-broadcasts): the bucket of sends left
    (module docstring), the last watermark sent and the newest one held back. ``interval_ms`` 0 lets every
    advance through; otherwise an ordinary advance waits for a full bucket (one interval, less 10 % for the
    timer's jitter, ``JITTER``, after the last send) and one that passed a window boundary (a multiple of
    ``boundary_ms``; 0: none) for one send left."""

    __slots__ = ("boundary_ms", "interval", "last_mark", "pending", "refilled", "tokens")

    def __init__(self, interval_ms: int, boundary_ms: int = NO_BOUNDARY) -> None:
        if interval_ms < 0:
            raise ValueError(f"a watermark interval cannot be negative: {interval_ms} ms")
        if boundary_ms < 0:
            raise ValueError(f"a window boundary period cannot be negative: {boundary_ms} ms")
        self.interval = interval_ms / 1000 * (1 - JITTER)
        """The time one send takes to refill, the timer's jitter allowed for."""
        self.boundary_ms = boundary_ms
        self.tokens: dict[K, float] = {}
        """Sends left per key, as of ``refilled``; a key not in it has a full bucket."""
        self.refilled: dict[K, float] = {}
        self.last_mark: dict[K, int] = {}
        """The last watermark sent per key: a boundary is passed relative to it."""
        self.pending: dict[K, int] = {}
        """Watermarks held back, newest per key: sent by ``due`` once the bucket allows."""

    def offer(self, key: K, watermark: int, now: float) -> bool:
        """Whether ``watermark`` goes out now; if not, it is held back (replacing an older one)."""
        if self.allows(key, watermark, now):
            self.sent(key, watermark, now)
            return True
        self.hold(key, watermark)
        return False

    def hold(self, key: K, watermark: int) -> None:
        """Hold ``watermark`` back for ``due`` (replacing an older one): for a caller whose own rule (a
        ``budget``) refused a send the pacer allowed."""
        if watermark > self.pending.get(key, watermark - 1):
            self.pending[key] = watermark

    def allows(self, key: K, watermark: int, now: float) -> bool:
        """Whether the bucket has a send for ``watermark``: a boundary one needs one, an ordinary one a full
        bucket (a hair below, for float error)."""
        if not self.interval:
            return True
        tokens = self._refill(key, now)
        boundary = crosses(self.last_mark.get(key, MIN_WATERMARK), watermark, self.boundary_ms)
        return tokens >= (1 if boundary else BURST) - 1e-9

    def _refill(self, key: K, now: float) -> float:
        last = self.refilled.get(key)
        if last is None:
            return BURST
        tokens = min(BURST, self.tokens[key] + max(0.0, now - last) / self.interval)
        self.tokens[key], self.refilled[key] = tokens, now
        return tokens

    def sent(self, key: K, watermark: int, now: float) -> None:
        """``watermark`` went out now: it takes a send of the bucket and is no longer held back."""
        if self.interval:
            self.tokens[key] = max(0.0, self._refill(key, now) - 1)
            self.refilled[key] = now
        self.last_mark[key] = max(watermark, self.last_mark.get(key, watermark))
        self.pending.pop(key, None)

    def due(self, now: float) -> Iterator[tuple[K, int]]:
        """The held-back watermarks the bucket now allows; each is then counted as sent now."""
        for key in [key for key, mark in self.pending.items() if self.allows(key, mark, now)]:
            watermark = self.pending[key]
            self.sent(key, watermark, now)
            yield key, watermark

    def drop(self, key: K) -> None:
        """End-of-stream or drain went out for ``key``: a watermark held back says nothing more."""
        self.pending.pop(key, None)

    def restore(self, pending: Mapping[K, int]) -> None:
        """Held-back watermarks of a snapshot: sent by ``take_all`` at the first call after a restart."""
        self.pending = dict(pending)
        self.tokens.clear()
        self.refilled.clear()
        self.last_mark.clear()

    def take_all(self, now: float) -> dict[K, int]:
        """Everything held back, counted as sent now (a restart sends it at once)."""
        taken = dict(self.pending)
        for key, watermark in taken.items():
            self.sent(key, watermark, now)
        return taken

"""Which envelopes a restarted task skips: those its restored state already reflects.

A task's state (``state``) is written at every commit after its output was flushed, so it may cover
envelopes beyond the checkpoint that a restart delivers again. The state records, per partition, the
offset of the last envelope it reflects; after a restore, envelopes up to that offset are skipped (their
effects are in the state, their output was already flushed) and the first later one ends the skipping
for its partition. Offsets are compared with the system's own order when it has one, else numerically;
an offset that cannot be compared is not skipped (re-applying is safe for control messages, which
reconcile idempotently, and is what Samza does for everything).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from millstream.model import SystemStreamPartition

Comparator = Callable[[str, str], "int | None"]
"""A system's offset order: negative, zero or positive like ``cmp``, or None when incomparable."""


class ReplayFilter:
    """The offset of the last envelope each partition delivered, and the replay to skip after a restore."""

    __slots__ = ("comparators", "offsets", "replay_until")

    def __init__(self, comparators: Mapping[str, Comparator] | None = None) -> None:
        self.comparators: dict[str, Comparator] = dict(comparators or {})
        """Offset order per system name."""
        self.offsets: dict[SystemStreamPartition, str] = {}
        self.replay_until: dict[SystemStreamPartition, str] = {}

    def accept(self, ssp: SystemStreamPartition, offset: str) -> bool:
        """Record a delivered envelope; False when it is a replay the restored state already reflects."""
        if self.replay_until and ssp in self.replay_until and self._replayed(ssp, offset):
            return False
        self.offsets[ssp] = offset
        return True

    def snapshot(self) -> dict[str, str]:
        return {ssp.key(): offset for ssp, offset in sorted(self.offsets.items())}

    def restore(self, document: Mapping[str, Any], keep: frozenset[SystemStreamPartition]) -> None:
        """Load the offsets of ``keep``'s partitions; envelopes up to them are skipped from now on.

        Partitions outside ``keep`` (no longer the task's, or repositioned by a startpoint) deliver new
        input even below the stored offsets, so they are not skipped.
        """
        self.offsets = {
            SystemStreamPartition.parse_key(key): str(offset)
            for key, offset in document.items()
            if SystemStreamPartition.parse_key(key) in keep
        }
        self.replay_until = dict(self.offsets)

    def _replayed(self, ssp: SystemStreamPartition, offset: str) -> bool:
        until = self.replay_until[ssp]
        compare = self.comparators.get(ssp.system)
        order = compare(offset, until) if compare is not None else None
        if order is None:
            order = compare_numeric(offset, until)
        if order is not None and order <= 0:
            return True
        del self.replay_until[ssp]
        return False


def compare_numeric(first: str, second: str) -> int | None:
    """The order of two integer offsets; None when either is not an integer."""
    try:
        a, b = int(first), int(second)
    except (TypeError, ValueError):
        return None
    return (a > b) - (a < b)

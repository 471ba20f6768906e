"""Reconciling the control messages of every producing task into one state per intermediate partition.

Rules (Samza's ``EndOfStreamStates`` / ``WatermarkStates``, plus persistence):

* **End-of-stream**: a partition ends once every producing task sent end-of-stream to it, counted by
  distinct task names against the producer count the messages carry (the largest seen), or as soon as a
  message without a task name (a source's or the aggregating task's) arrives.
* **Watermark**: each producer's latest watermark is kept and only ever raised (a lower one from the
  same producer is ignored: per-producer monotonic). Once every producer reported, the partition's
  watermark is the minimum of them; it never regresses and is reported only when it advances.
* **Drain**: a partition is drained once every producing task either sent end-of-stream or drained
  (at least one drained), or as soon as a drain without a task name arrives. Drain ends the partition
  for this run only: the producers that drained are kept in memory, never in the snapshot, so a restart
  waits for them again (their end-of-stream ones are remembered as usual). Which run's drain counts is
  the protocol's decision (``protocol``); the reconciler sees only those.
* **Idle producers** (``task.watermark.idle.timeout.ms`` > 0): once the partition has existed that
  long, the minimum may be taken over a quorum (``task.watermark.quorum.size.percentage`` of the
  producers) instead of all of them; and when the overall minimum is held back, over the producers heard
  from within the timeout, if they are a quorum.
* **Combined watermarks** (``combining``): a container's one watermark for several of its producing tasks
  counts as a watermark of each task it names, at its timestamp (a lower bound for each): each is raised,
  never lowered, so everything below holds as for one message per task.

Why restarts and replays cannot change the result: without idle timeouts, the state is a join
(least upper bound) of the messages applied — a set union of ended task names, a per-task maximum of
watermarks, a maximum producer count, and a watermark that is the maximum of ``min(per-task)`` over
time, which, since every term only grows, equals ``min`` of the final per-task maxima. A join is
idempotent, commutative and associative: applying a message twice, in another order, or once before a
snapshot and again after restoring it, yields the same state. So a snapshot written at any point
before a checkpoint, followed by a replay of every control message after that checkpoint, gives the
same state as an uninterrupted run (``tests/control/test_reconciliation.py`` checks this property).
Idle timeouts add wall-clock time to the rule; they can only raise the watermark earlier, never lower it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from millstream.control.errors import ControlStateError
from millstream.control.messages import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    CombinedWatermarkMessage,
    ControlMessage,
    DrainMessage,
    EndOfStreamMessage,
)
from millstream.errors import MillstreamError
from millstream.model import SystemStreamPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What one control message changed for its partition."""

    watermark: int | None = None
    """The partition's new watermark, when it advanced."""
    end_of_stream: bool = False
    """The partition ended with this message."""
    drained: bool = False
    """The partition drained with this message (ended for this run only)."""


NOTHING = Reconciled()


class PartitionControlState:
    """The bookkeeping of one intermediate partition (one SSP) in one consuming task."""

    __slots__ = (
        "created_at",
        "drained",
        "drained_tasks",
        "ended",
        "ended_tasks",
        "expected",
        "last_update",
        "timestamps",
        "watermark",
    )

    def __init__(self, created_at: float) -> None:
        self.expected = 0
        """Producing tasks: the largest ``task_count`` any message carried."""
        self.ended_tasks: set[str] = set()
        self.ended = False
        self.drained_tasks: set[str] = set()
        """Producers that drained in this run: in memory only (not in ``to_document``)."""
        self.drained = False
        self.timestamps: dict[str, int] = {}
        self.last_update: dict[str, float] = {}
        self.watermark = MIN_WATERMARK
        self.created_at = created_at

    def to_document(self) -> dict[str, Any]:
        return {
            "expected": self.expected,
            "ended": self.ended,
            "ended_tasks": sorted(self.ended_tasks),
            "timestamps": dict(sorted(self.timestamps.items())),
            "watermark": self.watermark,
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any], created_at: float) -> PartitionControlState:
        state = cls(created_at)
        state.expected = int(document["expected"])
        state.ended = bool(document["ended"])
        state.ended_tasks = {str(task) for task in document["ended_tasks"]}
        state.timestamps = {str(task): int(ts) for task, ts in document["timestamps"].items()}
        state.last_update = dict.fromkeys(state.timestamps, created_at)
        state.watermark = int(document["watermark"])
        return state


class ControlReconciler:
    """Per-partition end-of-stream and watermark reconciliation for one task's intermediate inputs.

    Not thread-safe: a task's messages are processed on one thread. ``clock`` is in seconds
    (``time.monotonic``) and matters only for idle timeouts.
    """

    def __init__(
        self,
        idle_timeout_ms: int = -1,
        quorum_percentage: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.idle_timeout = idle_timeout_ms / 1000 if idle_timeout_ms > 0 else 0.0
        self.quorum_percentage = quorum_percentage
        self.clock = clock
        self.partitions: dict[SystemStreamPartition, PartitionControlState] = {}

    def register(self, ssps: Iterable[SystemStreamPartition]) -> None:
        """Start tracking partitions; their idle clock starts now (Samza's state creation time)."""
        now = self.clock()
        for ssp in ssps:
            self.partitions.setdefault(ssp, PartitionControlState(now))

    def state(self, ssp: SystemStreamPartition) -> PartitionControlState:
        state = self.partitions.get(ssp)
        if state is None:
            state = self.partitions[ssp] = PartitionControlState(self.clock())
        return state

    def apply(self, ssp: SystemStreamPartition, message: ControlMessage) -> Reconciled:
        """Apply one control message read from ``ssp``; idempotent for repeated messages."""
        state = self.state(ssp)
        if state.ended or state.drained:
            return NOTHING
        if isinstance(message, CombinedWatermarkMessage):
            return self._apply_combined(ssp, state, message)
        if message.task_name is not None and message.task_count > state.expected:
            state.expected = message.task_count
        if isinstance(message, EndOfStreamMessage):
            if message.task_name is None:
                state.ended = True
            else:
                state.ended_tasks.add(message.task_name)
                state.ended = len(state.ended_tasks) >= state.expected
            return Reconciled(end_of_stream=True) if state.ended else self._drain_complete(state)
        if isinstance(message, DrainMessage):
            if message.task_name is None:
                state.drained = True
                return Reconciled(drained=True)
            state.drained_tasks.add(message.task_name)
            return self._drain_complete(state)
        before = state.watermark
        if message.task_name is None:
            state.watermark = max(state.watermark, message.timestamp)
        else:
            self._raise(ssp, state, message.task_name, message.timestamp, self.clock())
            self._recompute(state)
        return Reconciled(watermark=state.watermark) if state.watermark > before else NOTHING

    def _apply_combined(
        self, ssp: SystemStreamPartition, state: PartitionControlState, message: CombinedWatermarkMessage
    ) -> Reconciled:
        """A container's combined watermark: a watermark of each task it names, at its timestamp — so each
        named task's watermark is raised to it, never lowered (the join the module docstring relies on)."""
        state.expected = max(state.expected, message.task_count)
        before, now = state.watermark, self.clock()
        for task in message.task_names:
            self._raise(ssp, state, task, message.timestamp, now)
        self._recompute(state)
        return Reconciled(watermark=state.watermark) if state.watermark > before else NOTHING

    @staticmethod
    def _raise(ssp: SystemStreamPartition, state: PartitionControlState, task: str, timestamp: int, now: float) -> None:
        """One producer's watermark: kept if not below its earlier one (per-producer monotonic)."""
        previous = state.timestamps.get(task)
        if previous is not None and previous > timestamp:
            log.debug("%s: ignored watermark %d from %s, below its earlier %d", ssp, timestamp, task, previous)
            return
        state.timestamps[task] = timestamp
        state.last_update[task] = now

    @staticmethod
    def _drain_complete(state: PartitionControlState) -> Reconciled:
        """Drained once every producer ended or drained, and one of them drained."""
        if state.drained_tasks and len(state.ended_tasks | state.drained_tasks) >= state.expected:
            state.drained = True
            return Reconciled(drained=True)
        return NOTHING

    def check_idle(self) -> dict[SystemStreamPartition, int]:
        """Re-evaluate idle producers (periodically); the partitions whose watermark advanced."""
        if self.idle_timeout <= 0:
            return {}
        advanced = {}
        for ssp, state in self.partitions.items():
            if state.ended or state.drained:
                continue
            before = state.watermark
            self._recompute(state)
            if state.watermark > before:
                advanced[ssp] = state.watermark
        return advanced

    def watermark(self, ssp: SystemStreamPartition) -> int:
        """The partition's watermark: ``MAX_WATERMARK`` once it ended or drained."""
        state = self.partitions.get(ssp)
        if state is None:
            return MIN_WATERMARK
        return MAX_WATERMARK if state.ended or state.drained else state.watermark

    def is_end_of_stream(self, ssp: SystemStreamPartition) -> bool:
        state = self.partitions.get(ssp)
        return state is not None and state.ended

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return {ssp.key(): state.to_document() for ssp, state in sorted(self.partitions.items())}

    def restore(self, snapshot: Mapping[str, Mapping[str, Any]]) -> None:
        """Load a snapshot; idle clocks restart now (a restored producer is not idle yet)."""
        now = self.clock()
        for key, document in snapshot.items():
            try:
                ssp = SystemStreamPartition.parse_key(key)
                self.partitions[ssp] = PartitionControlState.from_document(document, now)
            except (KeyError, TypeError, ValueError, MillstreamError) as error:
                raise ControlStateError(
                    f"persisted control state of partition '{key}' is unreadable: {error}"
                ) from None

    def _recompute(self, state: PartitionControlState) -> None:
        timestamps = state.timestamps
        if not timestamps:
            return
        idle = self.idle_timeout
        quorum = int(state.expected * self.quorum_percentage)
        now = self.clock()
        complete = state.expected > 0 and len(timestamps) >= state.expected
        if not complete and not (idle > 0 and now - state.created_at >= idle and len(timestamps) >= max(quorum, 1)):
            return
        low = min(timestamps.values())
        if low <= state.watermark and idle > 0:
            active = [ts for task, ts in timestamps.items() if now - state.last_update.get(task, now) < idle]
            low = min(active) if active and len(active) >= quorum else MIN_WATERMARK
        if low > state.watermark:
            state.watermark = low

"""The messages an asynchronous task has in flight, and the completed prefix a checkpoint may cover (sans-IO).

Samza's AsyncRunLoop rule: a checkpoint covers, per partition, only the messages whose processing completed
*and* every message before them. With ``task.max.concurrency`` messages in flight, message 7 can complete
before message 5; committing offset 7 then would skip message 5 after a crash. So each partition keeps its
messages in the order they started, and a completion releases only the run of completed messages at the
head: the checkpointable offset of a partition is the last one released.

The window takes events (``started``, ``completed``) and answers; it never waits, reads a clock or runs
user code, so its rule is tested by itself (``tests/runtime/test_async_window.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

P = TypeVar("P", bound=Hashable)
T = TypeVar("T")


@dataclass
class _Slot(Generic[T]):
    offset: str
    item: T
    done: bool = False


@dataclass
class _Partition(Generic[T]):
    order: deque[_Slot[T]] = field(default_factory=deque)
    """In start order: the head is the oldest message still held."""
    slots: dict[str, _Slot[T]] = field(default_factory=dict)
    committable: str | None = None


class InFlightWindow(Generic[P, T]):
    """Per partition: messages started and not yet released, in start order.

    ``started(partition, offset, item)`` records a message (offsets are unique within a partition and start
    in offset order, as the run loop delivers them); ``completed(partition, offset)`` marks it done and
    returns the items the completion released — the completed run at the head of the partition, in start
    order (empty when an older message is still in flight). ``committable(partition)`` is the offset of
    the last released message: what a checkpoint may name.
    """

    def __init__(self) -> None:
        self._partitions: dict[P, _Partition[T]] = {}
        self.in_flight = 0
        """Messages started and not completed, over all partitions."""

    def started(self, partition: P, offset: str, item: T) -> None:
        state = self._partitions.get(partition)
        if state is None:
            state = self._partitions[partition] = _Partition()
        if offset in state.slots:
            raise ValueError(f"offset {offset} of {partition} is already in flight")
        slot = _Slot(offset, item)
        state.slots[offset] = slot
        state.order.append(slot)
        self.in_flight += 1

    def completed(self, partition: P, offset: str) -> list[T]:
        state = self._partitions[partition]
        slot = state.slots[offset]
        if slot.done:
            raise ValueError(f"offset {offset} of {partition} completed twice")
        slot.done = True
        self.in_flight -= 1
        released: list[T] = []
        order, slots = state.order, state.slots
        while order and order[0].done:  # the completed run at the head, oldest first
            head = order.popleft()
            released.append(head.item)
            state.committable = head.offset
            del slots[head.offset]
        return released

    def committable(self, partition: P) -> str | None:
        """The offset of the last message released in ``partition`` (None: none yet)."""
        state = self._partitions.get(partition)
        return state.committable if state is not None else None

    def pending(self, partition: P) -> int:
        """Messages of ``partition`` held: in flight, or completed behind one in flight."""
        state = self._partitions.get(partition)
        return len(state.order) if state is not None else 0

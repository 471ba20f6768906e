"""Calls that threads make at the same time, made as one: the shape of a database's group commit.

A caller hands its item over and waits. The first caller to find no call under way takes the items of every caller
waiting, in the order they arrived, and makes one call for all of them (``run``); the callers that arrive meanwhile
wait for the next call, which the first of them makes as soon as this one ended. Nothing waits on a timer: a caller
alone is served at once, and a call holds exactly the callers that were waiting while the previous one ran, so the
calls grow with the load and need no clock. A call answers each item on its own (a result, or the exception that
item raises), or fails as a whole, when every caller it was made for raises its error.

A container's checkpoint writes (``checkpoint/group_commit.py``) and Kafka's offset questions
(``connectors/kafka/grouped_lookups.py``) are made this way. The queue's rules are sans-IO (``CallBatches``); the
threads only wait on a condition around them (``GroupedCalls``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(eq=False)
class PendingCall(Generic[Item]):
    """One caller's item waiting for a call, and how that call ended for it."""

    item: Item
    done: bool = False
    result: Any = field(default=None, repr=False)
    error: BaseException | None = field(default=None, repr=False)


class CallBatches(Generic[Item]):
    """Which waiting items the next call takes: every one waiting, in the order they arrived, and none while a
    call runs. Single-threaded (its caller holds a lock); no I/O, no clock."""

    def __init__(self) -> None:
        self._waiting: list[PendingCall[Item]] = []
        self.running = False
        """A batch was taken and has not been reported ``ended`` yet."""
        self.batches = 0
        """Batches taken so far."""

    @property
    def waiting(self) -> int:
        """Items waiting for the next call."""
        return len(self._waiting)

    def add(self, item: Item) -> PendingCall[Item]:
        pending = PendingCall(item)
        self._waiting.append(pending)
        return pending

    def next_batch(self) -> list[PendingCall[Item]] | None:
        """Everything waiting, to call for now; None while a call runs or nothing waits."""
        if self.running or not self._waiting:
            return None
        batch, self._waiting = self._waiting, []
        self.running = True
        self.batches += 1
        return batch

    def ended(
        self, batch: Sequence[PendingCall[Item]], answers: Sequence[Any], error: BaseException | None = None
    ) -> None:
        """The batch's call ended: ``error`` failed all of it, else each item has its answer in ``answers`` (in
        the batch's order), an exception being that item's failure."""
        for pending, answer in zip(batch, answers if error is None else [error] * len(batch), strict=True):
            pending.done = True
            if isinstance(answer, BaseException):
                pending.error = answer
            else:
                pending.result = answer
        self.running = False


class GroupedCalls(Generic[Item, Result]):
    """``call(item)`` answered by ``run`` for the items of every caller waiting at once (the module docstring).
    ``run`` returns one answer per item, in their order: its result, or the exception that item raises.
    Thread-safe."""

    def __init__(self, run: Callable[[list[Item]], Sequence[Result | BaseException]]) -> None:
        self._run = run
        self._batches: CallBatches[Item] = CallBatches()
        self._changed = threading.Condition(threading.Lock())

    @property
    def batches(self) -> int:
        """Calls made (or tried) so far."""
        return self._batches.batches

    @property
    def waiting(self) -> int:
        """Callers waiting for the next call."""
        with self._changed:
            return self._batches.waiting

    def call(self, item: Item) -> Result:
        """``run``'s answer for ``item``, from a call made for it alone or together with other callers'; raises
        the item's failure, or the whole call's."""
        with self._changed:
            pending = self._batches.add(item)
            batch = self._batches.next_batch()
            while batch is None and not pending.done:
                self._changed.wait()
                batch = self._batches.next_batch() if not pending.done else None
        if batch is not None:
            self._call(batch)
        if pending.error is not None:
            raise pending.error
        return cast(Result, pending.result)

    def _call(self, batch: list[PendingCall[Item]]) -> None:
        answers: Sequence[Result | BaseException] = ()
        error: BaseException | None = None
        try:
            answers = self._run([pending.item for pending in batch])
            if len(answers) != len(batch):
                raise RuntimeError(f"a grouped call answered {len(answers)} of its {len(batch)} items")
        except BaseException as raised:  # the whole call failed: each of its callers raises it
            error = raised
        finally:
            with self._changed:
                self._batches.ended(batch, answers, error)
                self._changed.notify_all()

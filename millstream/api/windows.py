"""Event-time windows: which windows a message falls into, what is aggregated, and what comes out.

A window ``[start, end)`` collects the messages whose event time lies in it, per key, into an
accumulator, and emits one ``WindowPane`` when the operator's input watermark reaches ``end`` — the
point after which no on-time message can fall into it. With ``allowed_lateness_ms`` the window is kept
that much longer: a late message still updates it and re-emits the pane (``update=True``); after that,
late messages are dropped and counted.

Panes carry the event time ``end - 1``, so a window downstream of a window sees them on time.

A ``SessionWindow`` has no fixed bounds: each message opens a window ``[ts, ts + gap)`` that merges with
every session of its key it overlaps or touches, so a session ends ``gap_ms`` after its last message.
Merging combines accumulators with ``Aggregator.merge``, so only aggregators that can merge are accepted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple


class WindowPane(NamedTuple):
    """The aggregate of one key in one window."""

    key: Any
    start: int
    end: int
    value: Any
    update: bool = False
    """True when a late message changed a pane that was already emitted."""


class WindowDefinition(ABC):
    @abstractmethod
    def assign(self, timestamp: int) -> list[tuple[int, int]]:
        """The ``(start, end)`` of every window an event at ``timestamp`` belongs to."""


@dataclass(frozen=True)
class TumblingWindow(WindowDefinition):
    """Fixed, non-overlapping windows of ``size_ms``, aligned to the epoch."""

    size_ms: int

    def __post_init__(self) -> None:
        if self.size_ms <= 0:
            raise ValueError(f"a tumbling window needs a positive size, got {self.size_ms} ms")

    def assign(self, timestamp: int) -> list[tuple[int, int]]:
        start = timestamp - timestamp % self.size_ms
        return [(start, start + self.size_ms)]


@dataclass(frozen=True)
class SlidingWindow(WindowDefinition):
    """Windows of ``size_ms`` starting every ``slide_ms``; an event falls into ``size / slide`` of them."""

    size_ms: int
    slide_ms: int

    def __post_init__(self) -> None:
        if self.size_ms <= 0 or self.slide_ms <= 0 or self.slide_ms > self.size_ms:
            raise ValueError(
                f"a sliding window needs 0 < slide <= size, got size {self.size_ms} ms, slide {self.slide_ms} ms"
            )

    def assign(self, timestamp: int) -> list[tuple[int, int]]:
        last_start = timestamp - timestamp % self.slide_ms
        windows = []
        start = last_start
        while start > timestamp - self.size_ms:
            windows.append((start, start + self.size_ms))
            start -= self.slide_ms
        windows.reverse()
        return windows


@dataclass(frozen=True)
class SessionWindow(WindowDefinition):
    """Sessions per key separated by at least ``gap_ms`` of event time without a message.

    ``assign`` gives the window one message opens on its own; the session window operator merges it with
    the key's sessions it overlaps or touches (a message exactly ``gap_ms`` after the last one still joins
    its session, as in Flink and Kafka Streams).
    """

    gap_ms: int

    def __post_init__(self) -> None:
        if self.gap_ms <= 0:
            raise ValueError(f"a session window needs a positive gap, got {self.gap_ms} ms")

    def assign(self, timestamp: int) -> list[tuple[int, int]]:
        return [(timestamp, timestamp + self.gap_ms)]


class Aggregator(ABC):
    """How a window folds messages: ``initial()``, then ``add(accumulator, message)`` per message, and
    ``result(accumulator)`` for the pane. Accumulators are kept with the task's state, so they must be
    picklable."""

    @abstractmethod
    def initial(self) -> Any: ...

    @abstractmethod
    def add(self, accumulator: Any, message: Any) -> Any: ...

    def result(self, accumulator: Any) -> Any:
        return accumulator


class MergingAggregator(Aggregator):
    """An aggregator that can also combine two accumulators into one, which session windows need when a
    message bridges two sessions; only these serve session windows."""

    @abstractmethod
    def merge(self, first: Any, second: Any) -> Any:
        """The accumulator of two sessions that became one, ``first`` the earlier."""


class Count(MergingAggregator):
    def initial(self) -> int:
        return 0

    def add(self, accumulator: Any, message: Any) -> int:
        return int(accumulator) + 1

    def merge(self, first: Any, second: Any) -> int:
        return int(first) + int(second)


class Sum(MergingAggregator):
    def __init__(self, value: Callable[[Any], Any] | None = None) -> None:
        self.value = value

    def initial(self) -> Any:
        return 0

    def add(self, accumulator: Any, message: Any) -> Any:
        return accumulator + (self.value(message) if self.value else message)

    def merge(self, first: Any, second: Any) -> Any:
        return first + second


class Collect(MergingAggregator):
    """Every message (or ``value(message)``) of the window, in arrival order."""

    def __init__(self, value: Callable[[Any], Any] | None = None) -> None:
        self.value = value

    def initial(self) -> list[Any]:
        return []

    def add(self, accumulator: Any, message: Any) -> list[Any]:
        accumulator.append(self.value(message) if self.value else message)
        return accumulator

    def merge(self, first: list[Any], second: list[Any]) -> list[Any]:
        """The earlier session's messages, then the later's (each in arrival order)."""
        return [*first, *second]


class Aggregate(Aggregator):
    """An aggregator from functions: ``Aggregate(lambda: 0, lambda acc, m: acc + m["n"])``; with
    ``merge=lambda a, b: a + b`` it is a ``MergingAggregator`` (a ``MergingAggregate``) and also serves
    session windows."""

    def __new__(cls, *args: Any, merge: Callable[[Any, Any], Any] | None = None, **kwargs: Any) -> Aggregate:
        return super().__new__(MergingAggregate if merge is not None else cls)

    def __init__(
        self,
        initial: Callable[[], Any],
        add: Callable[[Any, Any], Any],
        result: Callable[[Any], Any] | None = None,
        merge: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        self._initial = initial
        self._add = add
        self._result = result
        self._merge = merge

    def initial(self) -> Any:
        return self._initial()

    def add(self, accumulator: Any, message: Any) -> Any:
        return self._add(accumulator, message)

    def result(self, accumulator: Any) -> Any:
        return self._result(accumulator) if self._result else accumulator


class MergingAggregate(Aggregate, MergingAggregator):
    """An ``Aggregate`` given ``merge=``; ``Aggregate(..., merge=f)`` makes one."""

    def merge(self, first: Any, second: Any) -> Any:
        assert self._merge is not None  # Aggregate.__new__ makes one only with merge=
        return self._merge(first, second)

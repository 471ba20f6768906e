"""Event-time windows: which windows a message falls into, what is aggregated, and what comes out.

A window ``[start, end)`` collects the messages whose event time lies in it, per key, into an
accumulator, and emits one ``WindowPane`` when the operator's input watermark reaches ``end`` — the
point after which no on-time message can fall into it. With ``allowed_lateness_ms`` the window is kept
that much longer: a late message still updates it and re-emits the pane (``update=True``); after that,
late messages are dropped and counted.

Panes carry the event time ``end - 1``, so a window downstream of a window sees them on time.
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


class Count(Aggregator):
    def initial(self) -> int:
        return 0

    def add(self, accumulator: Any, message: Any) -> int:
        return int(accumulator) + 1


class Sum(Aggregator):
    def __init__(self, value: Callable[[Any], Any] | None = None) -> None:
        self.value = value

    def initial(self) -> Any:
        return 0

    def add(self, accumulator: Any, message: Any) -> Any:
        return accumulator + (self.value(message) if self.value else message)


class Collect(Aggregator):
    """Every message (or ``value(message)``) of the window, in arrival order."""

    def __init__(self, value: Callable[[Any], Any] | None = None) -> None:
        self.value = value

    def initial(self) -> list[Any]:
        return []

    def add(self, accumulator: Any, message: Any) -> list[Any]:
        accumulator.append(self.value(message) if self.value else message)
        return accumulator


class Aggregate(Aggregator):
    """An aggregator from functions: ``Aggregate(lambda: 0, lambda acc, m: acc + m["n"])``."""

    def __init__(
        self,
        initial: Callable[[], Any],
        add: Callable[[Any, Any], Any],
        result: Callable[[Any], Any] | None = None,
    ) -> None:
        self._initial = initial
        self._add = add
        self._result = result

    def initial(self) -> Any:
        return self._initial()

    def add(self, accumulator: Any, message: Any) -> Any:
        return self._add(accumulator, message)

    def result(self, accumulator: Any) -> Any:
        return self._result(accumulator) if self._result else accumulator

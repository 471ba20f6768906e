"""Optional hooks of the functions given to operators (Samza's InitableFunction, WatermarkFunction...).

Pass a callable object to ``map``, ``filter``, ``flat_map``, ``join`` (the joiner) or ``sink`` and give
it any of these methods; the runtime calls the ones it has (inheriting from these classes only
documents the intent):

* ``init(context)`` once per task before the first message, ``close()`` when the task stops;
* ``on_watermark(watermark)`` each time the operator's input watermark advances — the minimum of the
  watermarks of the operators feeding it — before the watermark moves on downstream;
* ``on_end_of_stream()`` once, when every input of the operator has ended (after a last
  ``on_watermark(MAX_WATERMARK)``).

What ``on_watermark`` and ``on_end_of_stream`` return (an iterable, or None) continues downstream as if
the operator had emitted it — for a sink, it is sunk by the function itself. It carries the event time
of the watermark that released it, so it is never late downstream.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from millstream.api.task import TaskContext


class InitableFunction(ABC):
    @abstractmethod
    def init(self, context: TaskContext) -> None: ...


class ClosableFunction(ABC):
    @abstractmethod
    def close(self) -> None: ...


class WatermarkFunction(ABC):
    @abstractmethod
    def on_watermark(self, watermark: int) -> Iterable[Any] | None: ...


class EndOfStreamFunction(ABC):
    @abstractmethod
    def on_end_of_stream(self) -> Iterable[Any] | None: ...

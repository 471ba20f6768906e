"""``ValueState``: the handle a stateful function of the high-level API gets for the key of its message.

``stream.map_with_state(fn, key=...)`` calls ``fn(message, state)``; ``state`` reads and writes the one
value the operator keeps for ``key(message)``, as Flink's ``ValueState`` and Quix Streams' ``State`` do.
The value lives in the operator's task state, so it is checkpointed with the task and comes back after a
restart; it must be picklable.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable
from typing import Any


class ValueState(ABC):
    """The value of one key of a stateful operator."""

    @property
    @abstractmethod
    def key(self) -> Hashable:
        """The key the handle is scoped to."""

    @abstractmethod
    def get(self, default: Any = None) -> Any:
        """The key's value, or ``default`` when it has none."""

    @abstractmethod
    def set(self, value: Any) -> None:
        """Replace the key's value (``None`` is a value; ``clear`` removes it)."""

    @abstractmethod
    def clear(self) -> None:
        """Forget the key's value, so it takes no space in the state."""

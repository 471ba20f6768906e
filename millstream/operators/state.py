"""The state an operator keeps per task, behind a small key-value interface.

Windows keep their accumulators here. The only implementation today is in memory, persisted as a whole
with the task's control state at every commit (``OperatorGraphTask.before_checkpoint``). Once stores
exist (``context.get_store``), a store-backed implementation of the same interface replaces it: writes
go to the store (and its changelog or blob backup), ``snapshot`` returns nothing, and the window
operator rebuilds its timer index from ``items()`` at restore.
"""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator
from typing import Any

from millstream.control.errors import ControlStateError


class KeyValueState(ABC):
    """Keys are hashable and picklable; values are picklable."""

    @abstractmethod
    def get(self, key: Hashable) -> Any | None: ...

    @abstractmethod
    def put(self, key: Hashable, value: Any) -> None: ...

    @abstractmethod
    def delete(self, key: Hashable) -> None: ...

    @abstractmethod
    def items(self) -> Iterator[tuple[Hashable, Any]]: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def snapshot(self) -> bytes | None:
        """The whole state, for state kept with the control state; None when it persists itself."""

    @abstractmethod
    def restore(self, snapshot: bytes) -> None: ...


class InMemoryState(KeyValueState):
    """A dictionary, snapshotted with pickle (accumulators are arbitrary Python objects; the snapshot is
    read back only by the same application, from the job's own metadata store)."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.data: dict[Hashable, Any] = {}

    def get(self, key: Hashable) -> Any | None:
        return self.data.get(key)

    def put(self, key: Hashable, value: Any) -> None:
        self.data[key] = value

    def delete(self, key: Hashable) -> None:
        self.data.pop(key, None)

    def items(self) -> Iterator[tuple[Hashable, Any]]:
        return iter(list(self.data.items()))

    def __len__(self) -> int:
        return len(self.data)

    def snapshot(self) -> bytes:
        return pickle.dumps(list(self.data.items()), protocol=pickle.HIGHEST_PROTOCOL)

    def restore(self, snapshot: bytes) -> None:
        try:
            self.data = dict(pickle.loads(snapshot))
        except Exception as error:
            raise ControlStateError(f"state of operator '{self.name}' cannot be restored: {error}") from None

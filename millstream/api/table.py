"""Tables a stream can be joined with: the read side of adjunct data stores.

A ``TableDescriptor`` names a table and builds one instance per task (``build``), so a table's
implementation decides what it shares: an in-memory table built from static data here; adjunct stores
(kept up to date from a stream, or loaded from a bounded dataset) implement the same contract later.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from millstream.api.task import TaskContext


class ReadableTable(ABC):
    """Lookups by key; ``None`` for a missing key."""

    @abstractmethod
    def get(self, key: Any) -> Any | None: ...

    def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        found = {}
        for key in keys:
            value = self.get(key)
            if value is not None:
                found[key] = value
        return found

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the table holds; called when the task stops."""


class ReadWriteTable(ReadableTable):
    @abstractmethod
    def put(self, key: Any, value: Any) -> None: ...

    @abstractmethod
    def delete(self, key: Any) -> None: ...


class TableDescriptor(ABC):
    """Names a table of an application and builds each task's instance of it."""

    def __init__(self, name: str) -> None:
        self.name = name

    @abstractmethod
    def build(self, context: TaskContext) -> ReadableTable: ...


class InMemoryTable(ReadWriteTable):
    """A dictionary: for static reference data and for tests."""

    def __init__(self, data: Mapping[Any, Any] | None = None) -> None:
        self.data: dict[Any, Any] = dict(data or {})

    def get(self, key: Any) -> Any | None:
        return self.data.get(key)

    def put(self, key: Any, value: Any) -> None:
        self.data[key] = value

    def delete(self, key: Any) -> None:
        self.data.pop(key, None)


class InMemoryTableDescriptor(TableDescriptor):
    """An in-memory table per task, filled from ``data`` (a mapping, or a function of the task context
    returning one — for instance reading a file named in the config)."""

    def __init__(
        self, name: str, data: Mapping[Any, Any] | Callable[[TaskContext], Mapping[Any, Any]] | None = None
    ) -> None:
        super().__init__(name)
        self.data = data

    def build(self, context: TaskContext) -> InMemoryTable:
        data = self.data(context) if callable(self.data) else self.data
        return InMemoryTable(data)


class StoreTable(ReadableTable):
    """A key-value store seen as a table (the store decides what ``get`` costs and returns)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def get(self, key: Any) -> Any | None:
        return self.store.get(key)

    def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        result: dict[Any, Any] = self.store.get_all(keys)
        return result


class AdjunctTableDescriptor(TableDescriptor):
    """The adjunct data store ``name`` (``stores.<name>.adstore.input``) as a table: kept current from
    its stream by the framework, partitioned like the job's tasks or shared per container (broadcast)."""

    def build(self, context: TaskContext) -> StoreTable:
        return StoreTable(context.get_store(self.name))

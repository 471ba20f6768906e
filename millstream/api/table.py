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
from millstream.config.views import parse_stream


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

    def config(self) -> dict[str, str]:
        """Settings the table adds to the config of the job (or stage) that joins with it."""
        return {}


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
    """The adjunct data store ``name`` as a table: kept current from its stream by the framework,
    partitioned like the job's tasks or shared per container (broadcast).

    The store's settings come from the config (``stores.<name>.adstore.input`` ...), or from here: what is
    given here is added to the config of the stage that joins with the table (a conflicting value in the
    config is an error naming the key).
    """

    def __init__(
        self,
        name: str,
        input: str | None = None,
        *,
        key_serde: str | None = None,
        msg_serde: str | None = None,
        bootstrap: bool | None = None,
        versioned: bool | None = None,
        factory: str | None = None,
        extractor_factory: str | None = None,
    ) -> None:
        super().__init__(name)
        self.input = input
        self.settings = {
            "key.serde": key_serde,
            "msg.serde": msg_serde,
            "adstore.versioned": None if versioned is None else str(versioned).lower(),
            "factory": factory,
            "adstore.key.value.extractor.factory": extractor_factory,
        }
        self.bootstrap = bootstrap

    def config(self) -> dict[str, str]:
        settings = {f"stores.{self.name}.{key}": value for key, value in self.settings.items() if value is not None}
        if self.input is not None:
            settings[f"stores.{self.name}.adstore.input"] = self.input
            if self.bootstrap is not None:
                stream = parse_stream(self.input, f"the input of table '{self.name}'")
                key = f"systems.{stream.system}.streams.{stream.stream}.samza.bootstrap"
                settings[key] = str(self.bootstrap).lower()
        return settings

    def build(self, context: TaskContext) -> StoreTable:
        return StoreTable(context.get_store(self.name))

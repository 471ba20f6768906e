"""The task-facing view of an adjunct store: read-only with errors that say where its data comes from,
reads on whatever the target is now, and one retry when a retired version was closed under a read."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
import rocksdict

from millstream.adjunct.view import ReadOnlyKeyValueStore
from millstream.serde.builtin import JsonSerde, StringSerde
from millstream.storage.errors import StoreError
from millstream.storage.inmemory import InMemoryKeyValueStorageEngine
from millstream.storage.kv import KeyValueSnapshot, KeyValueStore, TaskKeyValueStore


def _store(entries: dict[str, Any]) -> TaskKeyValueStore:
    store = TaskKeyValueStore("Partition 0", "models", InMemoryKeyValueStorageEngine(), StringSerde(), JsonSerde())
    store.put_all(entries)
    return store


class _ClosedStore(KeyValueStore):
    """A target whose every read fails the way a closed version does."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.reads = 0

    def _fail(self) -> Any:
        self.reads += 1
        raise self.error

    def get(self, key: Any) -> Any:
        return self._fail()

    def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        return self._fail()

    def put(self, key: Any, value: Any) -> None:
        self._fail()

    def put_all(self, entries: Any) -> None:
        self._fail()

    def delete(self, key: Any) -> None:
        self._fail()

    def delete_all(self, keys: Iterable[Any]) -> None:
        self._fail()

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        return self._fail()

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self._fail()

    def snapshot(self, from_key: Any = None, to_key: Any = None) -> KeyValueSnapshot:
        return self._fail()

    def flush(self) -> None:
        pass


class _Targets:
    """Returns the given targets in turn (the last one forever), counting the calls."""

    def __init__(self, *targets: KeyValueStore) -> None:
        self.targets = list(targets)
        self.calls = 0

    def __call__(self) -> KeyValueStore:
        self.calls += 1
        return self.targets[min(self.calls, len(self.targets)) - 1]


READS: dict[str, Callable[[KeyValueStore], Any]] = {
    "get": lambda store: store.get("a"),
    "get_all": lambda store: store.get_all(["a", "b", "z"]),
    "range": lambda store: list(store.range("a", "b")),
    "all": lambda store: list(store.all()),
    "snapshot": lambda store: list(store.snapshot()),
}

WRITES: dict[str, Callable[[KeyValueStore], Any]] = {
    "put": lambda store: store.put("a", 1),
    "put_all": lambda store: store.put_all({"a": 1}),
    "delete": lambda store: store.delete("a"),
    "delete_all": lambda store: store.delete_all(["a"]),
}


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_writes_raise_naming_the_store_and_its_source(write: Callable[[KeyValueStore], Any]) -> None:
    target = _store({"a": 0})
    view = ReadOnlyKeyValueStore(lambda: target, "models", "stream kafka.model-updates")
    with pytest.raises(StoreError, match=r"adjunct store 'models' is read-only.*kafka\.model-updates"):
        write(view)
    assert target.get("a") == 0


def test_reads_go_to_the_target_of_the_moment() -> None:
    old, new = _store({"a": 1, "b": 2}), _store({"a": 10})
    current = [old]
    view = ReadOnlyKeyValueStore(lambda: current[0], "models", "stream log.models")
    assert view.get_all(["a", "b"]) == {"a": 1, "b": 2}
    current[0] = new
    assert view.get("a") == 10
    assert view.get_all(["a", "b"]) == {"a": 10}
    assert list(view.all()) == [("a", 10)]


@pytest.mark.parametrize(
    "closed_error", [rocksdict.DbClosedError("DB instance already closed"), StoreError("version 'v1' was closed")]
)
@pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
def test_a_read_on_a_closed_target_is_retried_once_on_the_current_one(
    read: Callable[[KeyValueStore], Any], closed_error: Exception
) -> None:
    closed = _ClosedStore(closed_error)
    new = _store({"a": 1, "b": 2})
    targets = _Targets(closed, new)
    view = ReadOnlyKeyValueStore(targets, "models", "stream log.models")
    assert read(view) == read(new)
    assert closed.reads == 1
    assert targets.calls == 2


@pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
def test_a_read_failing_twice_raises_instead_of_retrying_again(read: Callable[[KeyValueStore], Any]) -> None:
    closed = _ClosedStore(StoreError("adjunct store 'models' is closed"))
    view = ReadOnlyKeyValueStore(lambda: closed, "models", "stream log.models")
    with pytest.raises(StoreError, match="is closed"):
        read(view)
    assert closed.reads == 2


def test_other_errors_are_not_retried() -> None:
    broken = _ClosedStore(ValueError("not a closed store"))
    targets = _Targets(broken, _store({"a": 1}))
    view = ReadOnlyKeyValueStore(targets, "models", "stream log.models")
    with pytest.raises(ValueError, match="not a closed store"):
        view.get("a")
    assert targets.calls == 1


def test_get_asks_for_the_target_once() -> None:
    targets = _Targets(_store({"a": 1}))
    view = ReadOnlyKeyValueStore(targets, "models", "stream log.models")
    assert view.get("a") == 1
    assert targets.calls == 1

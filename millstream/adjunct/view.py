"""What a task gets for an adjunct store: a read-only store over whatever the framework serves now.

The framework fills an adjunct store from its input stream; a task only reads it, so every write
raises ``StoreError`` naming the store and where its data comes from. Reads go to the store the
``target`` callable returns *at the time of the call*: a versioned store switches what that callable
returns when it seals a version, and every read (``get_all`` included) then runs on one version, old
or new, never a mix.

A version being retired is closed after a grace period; a read that hits it just then (rocksdict's
``DbClosedError``, or ``StoreError`` from a closed engine) is retried once on the current target.
Only the call is retried: an iterator from ``range``/``all`` or a ``snapshot`` keeps reading the
version it started on and must be used up within the grace period.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NoReturn

import rocksdict

from millstream.storage.errors import StoreError
from millstream.storage.kv import KeyValueSnapshot, KeyValueStore

_CLOSED_ERRORS: tuple[type[Exception], ...] = (rocksdict.DbClosedError, StoreError)
"""What a read raises when the version it reads was closed under it."""


class ReadOnlyKeyValueStore(KeyValueStore):
    """A task's view of an adjunct store. Thread-safe as far as its target is: every read fetches the
    target once and reads from it alone."""

    def __init__(self, target: Callable[[], KeyValueStore], store_name: str, source: str) -> None:
        self._target = target
        self.store_name = store_name
        self.source = source

    def __repr__(self) -> str:
        return f"ReadOnlyKeyValueStore(store={self.store_name!r}, source={self.source!r})"

    def get(self, key: Any) -> Any:
        try:
            return self._target().get(key)
        except _CLOSED_ERRORS:
            return self._target().get(key)

    def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        keys = list(keys)
        try:
            return self._target().get_all(keys)
        except _CLOSED_ERRORS:
            return self._target().get_all(keys)

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        try:
            return self._target().range(from_key, to_key)
        except _CLOSED_ERRORS:
            return self._target().range(from_key, to_key)

    def all(self) -> Iterator[tuple[Any, Any]]:
        try:
            return self._target().all()
        except _CLOSED_ERRORS:
            return self._target().all()

    def snapshot(self, from_key: Any = None, to_key: Any = None) -> KeyValueSnapshot:
        try:
            return self._target().snapshot(from_key, to_key)
        except _CLOSED_ERRORS:
            return self._target().snapshot(from_key, to_key)

    def flush(self) -> None:
        """Nothing to do: the framework makes a version durable when it seals it."""

    def _read_only(self, action: str) -> NoReturn:
        raise StoreError(
            f"adjunct store '{self.store_name}' is read-only and is maintained from {self.source}: "
            f"a task cannot {action}"
        )

    def put(self, key: Any, value: Any) -> None:
        self._read_only("put")

    def put_all(self, entries: Mapping[Any, Any] | Iterable[tuple[Any, Any]]) -> None:
        self._read_only("put_all")

    def delete(self, key: Any) -> None:
        self._read_only("delete")

    def delete_all(self, keys: Iterable[Any]) -> None:
        self._read_only("delete_all")

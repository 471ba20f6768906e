"""The in-memory engine: a dict, with its keys sorted on demand for ordered reads.

Nothing survives the process: a store on this engine starts empty and, with a changelog, is rebuilt
by replaying it. Ordered reads sort the keys once after inserts or deletes and reuse that order until
the next one, so write-heavy phases cost a dict operation and read-heavy phases a bisect.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from millstream.config.views import StoreConfig
from millstream.storage.kv import Entry, KeyValueStorageEngine


class InMemoryKeyValueStorageEngine(KeyValueStorageEngine):
    persistent = False

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._sorted: list[bytes] | None = None

    def __repr__(self) -> str:
        return f"InMemoryKeyValueStorageEngine({len(self._data)} keys)"

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def get_all(self, keys: Sequence[bytes]) -> list[bytes | None]:
        get = self._data.get
        return [get(key) for key in keys]

    def put(self, key: bytes, value: bytes) -> None:
        data = self._data
        if self._sorted is not None and key not in data:
            self._sorted = None
        data[key] = value

    def delete(self, key: bytes) -> None:
        if self._data.pop(key, None) is not None:
            self._sorted = None

    def _keys(self) -> list[bytes]:
        if self._sorted is None:
            self._sorted = sorted(self._data)
        return self._sorted

    def _entries(self, start: bytes | None, end: bytes | None) -> list[Entry]:
        keys = self._keys()
        first = 0 if start is None else bisect_left(keys, start)
        last = len(keys) if end is None else bisect_left(keys, end)
        data = self._data
        # .get: an adjunct store is written by one thread while tasks read it from others
        return [(key, value) for key in keys[first:last] if (value := data.get(key)) is not None]

    def range(self, start: bytes | None, end: bytes | None) -> Iterator[Entry]:
        return iter(self._entries(start, end))

    def snapshot(self, start: bytes | None, end: bytes | None) -> Iterable[Entry]:
        return self._entries(start, end)

    def close(self) -> None:
        self._data = {}
        self._sorted = None


class InMemoryStorageEngineFactory:
    """``stores.<s>.factory=inmemory``."""

    persistent = False

    def get_storage_engine(
        self, store_name: str, store_dir: Path, config: StoreConfig, tasks_in_container: int = 1
    ) -> KeyValueStorageEngine:
        return InMemoryKeyValueStorageEngine()

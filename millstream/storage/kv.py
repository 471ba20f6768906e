"""Key-value stores: what a task reads and writes (``KeyValueStore``), and the byte-level engines under it.

Layers, as in Samza (serialized → logged → engine), folded into one ``TaskKeyValueStore`` so that a
``put`` costs one call per layer boundary: it serializes key and value with the store's serdes,
writes the bytes to the engine, hands them to the changelog when the store has one, and marks the
store dirty so the next commit snapshots it.

Keys are ordered by their serialized bytes (as RocksDB orders them): ``range`` and ``snapshot`` follow
that order, whatever the key serde. A store belongs to one task and is used from the task's thread
only; commits read checkpoint directories, never the live store.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from millstream.serde.base import Serde, SerdeError
from millstream.storage.errors import StoreError

Entry = tuple[bytes, bytes]


class KeyValueSnapshot(ABC):
    """A consistent view of a key range: iterate it as often as needed, then ``close`` it."""

    @abstractmethod
    def __iter__(self) -> Iterator[tuple[Any, Any]]: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the view holds."""

    def __enter__(self) -> KeyValueSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KeyValueStore(ABC):
    """A task's key-value store (Samza's ``KeyValueStore``). A ``None`` value means absent: putting
    ``None`` deletes. Iteration order is the order of the serialized keys."""

    @abstractmethod
    def get(self, key: Any) -> Any: ...

    @abstractmethod
    def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        """The values of the keys present (absent keys are left out)."""

    @abstractmethod
    def put(self, key: Any, value: Any) -> None: ...

    @abstractmethod
    def put_all(self, entries: Mapping[Any, Any] | Iterable[tuple[Any, Any]]) -> None: ...

    @abstractmethod
    def delete(self, key: Any) -> None: ...

    @abstractmethod
    def delete_all(self, keys: Iterable[Any]) -> None: ...

    @abstractmethod
    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        """Entries with ``from_key <= key < to_key``, in key order."""

    @abstractmethod
    def all(self) -> Iterator[tuple[Any, Any]]: ...

    @abstractmethod
    def snapshot(self, from_key: Any = None, to_key: Any = None) -> KeyValueSnapshot:
        """A consistent, re-iterable view of ``[from_key, to_key)`` (None: unbounded) as of now."""

    @abstractmethod
    def flush(self) -> None: ...


class BulkLoader(ABC):
    """Fills an engine that nothing reads meanwhile, faster than its writes would (a changelog replay into a
    store that started empty): what ``put_columns`` hands over is in the engine, as if written in the order
    handed over, once ``finish`` returns; the engine is not to be read before."""

    @abstractmethod
    def put_columns(self, keys: Sequence[bytes | None], values: Sequence[bytes | None], size: int) -> None:
        """As ``KeyValueStorageEngine.put_columns``; ``size``: the bytes of the values (``RecordBatch.size``)."""

    @abstractmethod
    def finish(self) -> int:
        """Make every record handed over part of the engine, readable with its normal options; returns how many
        records took the loader's fast path (the restore reports it)."""

    @abstractmethod
    def abort(self) -> None:
        """Give up (the replay failed): drop what is not yet in the engine and any files made for it."""


class KeyValueStorageEngine(ABC):
    """Bytes to bytes, ordered by key bytes: what a store factory builds (RocksDB, in-memory...)."""

    persistent: ClassVar[bool] = False
    """True when the engine lives in files that ``checkpoint`` can snapshot (and a blob store back up)."""

    @abstractmethod
    def get(self, key: bytes) -> bytes | None: ...

    def get_all(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return [self.get(key) for key in keys]

    @abstractmethod
    def put(self, key: bytes, value: bytes) -> None: ...

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write ``entries`` in order; a ``None`` value deletes its key."""
        for key, value in entries:
            if value is None:
                self.delete(key)
            else:
                self.put(key, value)

    def put_columns(self, keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> None:
        """Write ``keys[i]`` → ``values[i]`` in order, as one write where the engine has one: what a changelog
        replay hands over per batch (``RecordBatch``). A None value deletes its key; a None key is skipped (a
        record that names no key holds no state)."""
        self.put_all((key, value) for key, value in zip(keys, values, strict=True) if key is not None)

    def bulk_loader(self) -> BulkLoader | None:
        """A loader that fills the engine while nothing reads it (a changelog replay into a store that started
        empty), or None when the engine has nothing faster than ``put_columns``."""
        return None

    @abstractmethod
    def delete(self, key: bytes) -> None: ...

    @abstractmethod
    def range(self, start: bytes | None, end: bytes | None) -> Iterator[Entry]:
        """Entries with ``start <= key < end`` (None: unbounded), in key order, consistent as of the call."""

    def all(self) -> Iterator[Entry]:
        return self.range(None, None)

    @abstractmethod
    def snapshot(self, start: bytes | None, end: bytes | None) -> Iterable[Entry]:
        """A re-iterable consistent view of ``[start, end)``."""

    def flush(self) -> None:  # noqa: B027 - in-memory engines have nothing to flush
        """Make every write so far part of the engine's files (before ``checkpoint``)."""

    def checkpoint(self, path: Path) -> None:
        """Write a consistent copy of the engine's files to ``path`` (hard links where possible)."""
        raise StoreError(f"{type(self).__name__} is not persistent: it has no files to checkpoint")

    def ingest(self, files: Sequence[Path]) -> None:
        """Adopt whole table files (bulk-built, see ``millstream.adjunct.sst``); their entries override
        the engine's. The files are left in place for the caller."""
        raise StoreError(f"{type(self).__name__} cannot ingest table files: bulk-built data needs RocksDB")

    @abstractmethod
    def close(self) -> None: ...


class _DecodedSnapshot(KeyValueSnapshot):
    def __init__(self, entries: Iterable[Entry], decode: Callable[[Entry], tuple[Any, Any]]) -> None:
        self._entries = entries
        self._decode = decode

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return map(self._decode, self._entries)

    def close(self) -> None:
        close = getattr(self._entries, "close", None)
        if close is not None:
            close()


ChangelogWriter = Callable[[bytes, bytes | None], None]
"""Receives every change a store makes, as bytes; ``None`` is a deletion (a tombstone)."""


class TaskKeyValueStore(KeyValueStore):
    """A task's store: serdes over an engine, with every change also handed to the changelog writer.

    ``dirty`` says whether anything was written since the last commit's snapshot cleared it.
    """

    def __init__(
        self,
        task_name: str,
        store_name: str,
        engine: KeyValueStorageEngine,
        key_serde: Serde | None = None,
        msg_serde: Serde | None = None,
        changelog: ChangelogWriter | None = None,
    ) -> None:
        self.task_name = task_name
        self.store_name = store_name
        self.engine = engine
        self._key_to = key_serde.to_bytes if key_serde else _require_bytes
        self._key_from = key_serde.from_bytes if key_serde else _identity
        self._msg_to = msg_serde.to_bytes if msg_serde else _require_bytes
        self._msg_from = msg_serde.from_bytes if msg_serde else _identity
        self._changelog = changelog
        self.has_key_serde = key_serde is not None
        """False: keys are bytes, stored as they are."""
        self.dirty = False

    def __repr__(self) -> str:
        return f"TaskKeyValueStore(task={self.task_name!r}, store={self.store_name!r}, engine={self.engine!r})"

    def _error(self, action: str, error: Exception) -> StoreError:
        return StoreError(f"task '{self.task_name}' store '{self.store_name}': cannot {action}: {error}")

    def _key(self, key: Any) -> bytes:
        if key is None:
            raise StoreError(f"task '{self.task_name}' store '{self.store_name}': keys cannot be None")
        try:
            return self._key_to(key)
        except (SerdeError, TypeError, ValueError) as error:
            raise self._error("serialize the key", error) from None

    def _msg(self, value: Any) -> bytes:
        try:
            return self._msg_to(value)
        except (SerdeError, TypeError, ValueError) as error:
            raise self._error("serialize the value", error) from None

    def _value(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return self._msg_from(data)
        except (SerdeError, TypeError, ValueError) as error:
            raise self._error("deserialize a stored value", error) from None

    def _entry(self, entry: Entry) -> tuple[Any, Any]:
        try:
            return self._key_from(entry[0]), self._msg_from(entry[1])
        except (SerdeError, TypeError, ValueError) as error:
            raise self._error("deserialize a stored entry", error) from None

    def encode_key(self, key: Any) -> bytes:
        """``key`` as the engine stores it (what a cache in front of this store is keyed by)."""
        return self._key(key)

    def encode_value(self, value: Any) -> bytes:
        """``value`` as the engine stores it: a cache in front of this store serializes at ``put``, so a value
        the serde refuses fails where the task put it (under the task's error policy), not at a later commit."""
        return self._msg(value)

    def get_encoded(self, data_key: bytes) -> Any:
        """The value stored under the serialized ``data_key``."""
        return self._value(self.engine.get(data_key))

    def put_serialized(self, entries: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Write serialized entries (``None`` deletes), in order, to the engine as one batch and to the
        changelog: how a write-back cache hands over its dirty entries."""
        self.engine.put_all(entries)
        if self._changelog is not None:
            for key, data in entries:
                self._changelog(key, data)
        self.dirty = True

    def write_back(self) -> None:
        """Nothing: every write already reached the engine and the changelog (``CachedStore`` overrides it)."""

    def get(self, key: Any) -> Any:
        return self._value(self.engine.get(self._key(key)))

    def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        keys = list(keys)
        values = self.engine.get_all([self._key(key) for key in keys])
        return {key: self._value(value) for key, value in zip(keys, values, strict=True) if value is not None}

    def put(self, key: Any, value: Any) -> None:
        if value is None:
            self.delete(key)
            return
        data_key = self._key(key)
        data = self._msg(value)
        self.engine.put(data_key, data)
        if self._changelog is not None:
            self._changelog(data_key, data)
        self.dirty = True

    def put_all(self, entries: Mapping[Any, Any] | Iterable[tuple[Any, Any]]) -> None:
        pairs = entries.items() if isinstance(entries, Mapping) else entries
        encoded = [(self._key(key), None if value is None else self._msg(value)) for key, value in pairs]
        self.engine.put_all(encoded)
        if self._changelog is not None:
            for key, value in encoded:
                self._changelog(key, value)
        self.dirty = True

    def delete(self, key: Any) -> None:
        data_key = self._key(key)
        self.engine.delete(data_key)
        if self._changelog is not None:
            self._changelog(data_key, None)
        self.dirty = True

    def delete_all(self, keys: Iterable[Any]) -> None:
        self.put_all([(key, None) for key in keys])

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        return map(self._entry, self.engine.range(self._key(from_key), self._key(to_key)))

    def all(self) -> Iterator[tuple[Any, Any]]:
        return map(self._entry, self.engine.all())

    def snapshot(self, from_key: Any = None, to_key: Any = None) -> KeyValueSnapshot:
        start = None if from_key is None else self._key(from_key)
        end = None if to_key is None else self._key(to_key)
        return _DecodedSnapshot(self.engine.snapshot(start, end), self._entry)

    def flush(self) -> None:
        self.engine.flush()


def _identity(data: bytes) -> Any:
    return data


def _require_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"a {type(value).__name__} is not bytes and the store has no serde for it (key.serde/msg.serde)")

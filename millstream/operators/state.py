"""The state an operator keeps per task, behind a small key-value interface.

Windows (and every other stateful operator) keep their entries here. In a job, a task's stateful
operators share one store of the task, its *operator store* (``StoreBackedState``, one key prefix per
operator), declared by the planner with the job's state backends: writes go to the store (and its
changelog or blob backup), ``snapshot`` returns nothing, and the window operator rebuilds its timer index
from ``items()`` at restore. The task's control state lives in the same store (``StoreControlState``),
so one checkpoint always describes both. ``InMemoryState`` serves graphs driven without a job (tests),
persisted whole with the control state.
"""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

import msgpack

from millstream.control.errors import ControlStateError
from millstream.storage.kv import KeyValueStore


class KeyValueState(ABC):
    """Keys are hashable and picklable; values are picklable. A value changed in place must be ``put``
    again: a store-backed state hands out copies."""

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

    def flush(self) -> None:  # noqa: B027 - only cached implementations have something to write
        """Write what is cached to where the state persists (before the task's store is snapshotted)."""


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


CONTROL_STATE_KEY = b"\x00control-state"
"""The key of the task's control-state document in its operator store; operator keys start with a
prefix that is never empty, so none of them sorts here."""
STORE_STATE_FORMAT_VERSION = 1
_PLAIN = b"\x01"
_PICKLED = b"\x02"
_DELETED = object()


def encode_key(key: Hashable) -> bytes:
    """Canonical bytes of ``key``: msgpack for plain data (equal keys of str, int, bytes, float, bool, None
    and tuples of them always give equal bytes, whoever built them), else pickle (a key type of the user's
    own, which must pickle the same way each time it is equal)."""
    try:
        return _PLAIN + msgpack.packb(key, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return _PICKLED + pickle.dumps(key, protocol=pickle.HIGHEST_PROTOCOL)


def decode_key(data: bytes) -> Hashable:
    if data[:1] == _PLAIN:
        return msgpack.unpackb(data[1:], raw=False, use_list=False, strict_map_key=False)
    return pickle.loads(data[1:])


class StoreBackedState(KeyValueState):
    """One operator's entries in the task's operator store, under the operator's key prefix.

    Why a store: the entries commit incrementally (only the keys written since the last commit reach the
    changelog or the blob store's new files) and restore like any store, at exactly the checkpoint's
    state. Values are pickled (accumulators are arbitrary Python objects, read back only by the same
    application). A small write-back cache keeps the latest value of recently written keys, so a hot key
    updated by every message costs one store write per flush, not one per message; ``flush`` empties it
    and runs before every snapshot of the store (``OperatorGraphTask.before_checkpoint``), so a checkpoint
    always holds every write made before it.
    """

    def __init__(self, store: KeyValueStore, op_id: str, cache_size: int = 10_000) -> None:
        self.store = store
        self.name = op_id
        self.prefix = op_id.encode() + b"\x00"
        self.cache_size = cache_size
        self._cache: dict[bytes, Any] = {}
        self._length: int | None = None

    def _key(self, key: Hashable) -> bytes:
        return self.prefix + encode_key(key)

    def get(self, key: Hashable) -> Any | None:
        encoded = self._key(key)
        if encoded in self._cache:
            value = self._cache[encoded]
            return None if value is _DELETED else value
        data = self.store.get(encoded)
        if data is None:
            return None
        try:
            return pickle.loads(data)
        except Exception as error:
            raise ControlStateError(
                f"state of operator '{self.name}': the value of key {key!r} cannot be read: {error}"
            ) from None

    def put(self, key: Hashable, value: Any) -> None:
        self._length = None
        self._cache[self._key(key)] = value
        if len(self._cache) >= self.cache_size:
            self.flush()

    def delete(self, key: Hashable) -> None:
        self._length = None
        self._cache[self._key(key)] = _DELETED
        if len(self._cache) >= self.cache_size:
            self.flush()

    def flush(self) -> None:
        """Write the cached changes to the store (and so to its changelog)."""
        if not self._cache:
            return
        entries = [
            (key, None if value is _DELETED else pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
            for key, value in self._cache.items()
        ]
        self._cache.clear()
        self.store.put_all(entries)

    def items(self) -> Iterator[tuple[Hashable, Any]]:
        """Every entry, in the order of the encoded keys (a consistent view as of the call)."""
        self.flush()
        start = len(self.prefix)
        for data, value in self.store.range(self.prefix, self.prefix[:-1] + b"\x01"):
            yield decode_key(data[start:]), pickle.loads(value)

    def __len__(self) -> int:
        if self._length is None:
            self.flush()
            self._length = sum(1 for _ in self.store.range(self.prefix, self.prefix[:-1] + b"\x01"))
        return self._length

    def snapshot(self) -> bytes | None:
        """Nothing: the store persists itself."""
        return None

    def restore(self, snapshot: bytes) -> None:
        """Load a whole-state snapshot an earlier version kept with the control state (an upgrade)."""
        self.flush()
        self.store.delete_all([key for key, _ in self.store.range(self.prefix, self.prefix[:-1] + b"\x01")])
        try:
            entries = pickle.loads(snapshot)
        except Exception as error:
            raise ControlStateError(f"state of operator '{self.name}' cannot be restored: {error}") from None
        for key, value in entries:
            self.put(key, value)
        self.flush()


class StoreControlState:
    """The task's control state as one entry of its operator store, beside the operators' entries.

    Written at ``before_checkpoint``, after the output flush and before the store's snapshot (the runtime
    flushes the record to the changelog first), so the checkpoint carries operator state and control
    state of the same instant: a restart restores both to
    the checkpoint, and the replay filter skips exactly what the restored entries already reflect. Kept
    in the metadata store instead, the control state could be newer than a store restored to an older
    checkpoint (a crash between the two writes), and the replayed messages the filter skips would be
    missing from the windows. ``fallback`` reads the metadata store's document once, for a task that
    committed with an earlier version (its store then holds no control state yet).
    """

    def __init__(
        self,
        store: KeyValueStore,
        task_name: str,
        flush: Callable[[], None],
        fallback: Callable[[], dict[str, Any] | None] = lambda: None,
    ) -> None:
        self.store = store
        self.task_name = task_name
        self.flush = flush
        self.fallback = fallback
        self.writes = 0
        self.bytes_written = 0

    def load(self) -> dict[str, Any] | None:
        raw = self.store.get(CONTROL_STATE_KEY)
        if raw is None:
            return self.fallback()
        try:
            document = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        except (msgpack.UnpackException, ValueError, TypeError) as error:
            raise ControlStateError(
                f"control state of task '{self.task_name}' in its operator store: {error}"
            ) from None
        if not isinstance(document, dict) or document.get("format") != STORE_STATE_FORMAT_VERSION:
            raise ControlStateError(
                f"control state of task '{self.task_name}' in its operator store has an unknown format"
            )
        return document

    def save(self, snapshot: Mapping[str, Any]) -> None:
        """Write the operators' cached changes and the control state into the store, before its snapshot."""
        self.flush()
        data = msgpack.packb({**snapshot, "format": STORE_STATE_FORMAT_VERSION}, use_bin_type=True)
        self.store.put(CONTROL_STATE_KEY, data)
        self.writes += 1
        self.bytes_written += len(data)

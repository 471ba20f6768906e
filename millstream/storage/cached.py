"""A write-back object cache in front of a task's store (Samza's ``CachedStore``, Kafka Streams' record cache).

Why: a task that reads and rewrites the same keys over and over (a count, an aggregate per key) would pay a
serde call, an engine read, an engine write and a changelog record per message. Here the latest value of
each recently used key is kept as the object the task put; reads of those keys never reach the engine, and
writes stay *dirty* in the cache (serialized at ``put``) until they are written back, as one batch to the
engine and one changelog record per key. A hot key then costs one engine write and one changelog record
per write-back, not per message.

When dirty entries are written back:

- at every commit, before the commit flushes the task's producers (``TaskStorageManager.write_back``, called
  by ``TaskInstance.commit``), and again after the task's ``before_checkpoint``: the changelog and the
  snapshot the checkpoint names always hold every write made before it, so at-least-once is unchanged;
- when ``write.batch.size`` keys are dirty, and when a dirty entry is about to be evicted (the whole dirty
  set goes, as one batch);
- before anything iterates the engine (``range``, ``all``, ``snapshot``) and at ``flush``.

A commit's snapshot runs beside processing (``TaskStorageManager.hold``): ``hold`` takes the dirty entries as of
the commit's cut (the commit thread writes them to the engine and the changelog) and holds every write-back until
``release``. Meanwhile the task's writes stay in the cache, dirty, past ``write.batch.size`` and without evicting
(the cache may outgrow ``object.cache.size`` by what the task writes during the snapshot), so the engine and the
changelog hold exactly the state of the cut while the snapshot is made, and reads still see every write; a
``range``, ``all`` or ``snapshot`` waits for the release (they read the engine, which must hold every write).

Guarantees: reads see the task's own writes; the cache holds at most ``object.cache.size`` entries, least
recently used evicted first; known-absent keys are cached too. Entries are keyed by the serialized key (the
engine's key), so two keys the serde maps to the same bytes are one entry, as in the engine.

The cache hands out the very objects the task put (no copies, as in Samza): the store and its changelog hold
a value as it was serialized at ``put``, so a value mutated in place and not put again is seen by ``get``
only while it stays cached. Values are serialized at ``put`` (as Kafka Streams does), not at write-back, so
a value the store's serde refuses fails in the task's ``process``, where the task's error policy applies and
the error names the message's offset, rather than at a later commit. A store belongs to one task and is used
from the task's thread only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from millstream.storage.kv import KeyValueSnapshot, KeyValueStore, TaskKeyValueStore

_MISSING = object()


class CachedStore(KeyValueStore):
    """``store`` behind an LRU cache of ``cache_size`` entries holding at most ``write_batch_size`` dirty ones.

    ``dirty`` says whether anything was written since the last commit's snapshot cleared it (as
    ``TaskKeyValueStore.dirty``); ``write_back`` empties the dirty set into ``store``.
    """

    def __init__(self, store: TaskKeyValueStore, cache_size: int, write_batch_size: int) -> None:
        if cache_size < 1 or not 1 <= write_batch_size <= cache_size:
            raise ValueError(f"cache size {cache_size}, write batch size {write_batch_size}: need 1 <= batch <= size")
        self.store = store
        self.task_name = store.task_name
        self.store_name = store.store_name
        self.cache_size = cache_size
        self.write_batch_size = write_batch_size
        self.dirty = False
        self._cache: OrderedDict[bytes, Any] = OrderedDict()
        """Serialized key → the object put (``None``: absent, deleted or never written)."""
        self._dirty: dict[bytes, bytes | None] = {}
        """The keys whose cached value the store does not hold yet, in the order they became dirty, with that
        value serialized at ``put`` (``None``: deleted)."""
        self._held = False
        """A commit's snapshot is being made: write-backs and evictions wait for ``release``."""
        self._released = threading.Event()
        self._released.set()
        self._raw_keys = not store.has_key_serde
        self._encode = store.encode_key
        self._encode_value = store.encode_value

    def __repr__(self) -> str:
        return f"CachedStore({self.store!r}, size={self.cache_size}, write_batch={self.write_batch_size})"

    def get(self, key: Any) -> Any:
        data_key = key if self._raw_keys and type(key) is bytes else self._encode(key)
        cache = self._cache
        value = cache.get(data_key, _MISSING)
        if value is not _MISSING:
            cache.move_to_end(data_key)
            return value
        value = self.store.get_encoded(data_key)
        cache[data_key] = value
        if len(cache) > self.cache_size:
            self._evict()
        return value

    def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        found = {}
        for key in keys:
            value = self.get(key)
            if value is not None:
                found[key] = value
        return found

    def put(self, key: Any, value: Any) -> None:
        data_key = key if self._raw_keys and type(key) is bytes else self._encode(key)
        data = None if value is None else self._encode_value(value)
        cache = self._cache
        cache[data_key] = value
        cache.move_to_end(data_key)
        self.dirty = True
        dirty = self._dirty
        dirty[data_key] = data
        if len(dirty) >= self.write_batch_size:
            self.write_back()
        if len(cache) > self.cache_size:
            self._evict()

    def put_all(self, entries: Mapping[Any, Any] | Iterable[tuple[Any, Any]]) -> None:
        pairs = entries.items() if isinstance(entries, Mapping) else entries
        for key, value in pairs:
            self.put(key, value)

    def delete(self, key: Any) -> None:
        self.put(key, None)

    def delete_all(self, keys: Iterable[Any]) -> None:
        for key in keys:
            self.put(key, None)

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        self._write_back_released()
        return self.store.range(from_key, to_key)

    def all(self) -> Iterator[tuple[Any, Any]]:
        self._write_back_released()
        return self.store.all()

    def snapshot(self, from_key: Any = None, to_key: Any = None) -> KeyValueSnapshot:
        self._write_back_released()
        return self.store.snapshot(from_key, to_key)

    def flush(self) -> None:
        self._write_back_released()
        self.store.flush()

    def _write_back_released(self) -> None:
        """Write back once no snapshot holds the cache: what follows reads the engine, which must hold every write."""
        if self._held:
            self._released.wait()
        self.write_back()

    def hold(self) -> list[tuple[bytes, bytes | None]]:
        """A commit's cut, on the task's thread: the dirty entries in the order they became dirty (the caller
        writes them to the store, ``put_serialized``), and every later write held in the cache until ``release``."""
        entries = list(self._dirty.items())
        self._dirty.clear()
        self._released.clear()
        self._held = True
        return entries

    def release(self) -> None:
        """The snapshot is made: write-backs and evictions go on (from any thread; the next ``put`` past
        ``write.batch.size`` or the next commit writes back what was held)."""
        self._held = False
        self._released.set()

    @property
    def pending_writes(self) -> int:
        """How many keys are dirty (written to the cache only)."""
        return len(self._dirty)

    def write_back(self) -> None:
        """Write every dirty entry to the store (engine and changelog) as one batch, in the order the keys
        became dirty; the entries stay cached, clean."""
        dirty = self._dirty
        if not dirty or self._held:
            return
        entries = list(dirty.items())
        dirty.clear()
        self.store.put_serialized(entries)

    def _evict(self) -> None:
        if self._held:  # a dirty entry evicted now would be read from an engine that lacks it
            return
        cache = self._cache
        while len(cache) > self.cache_size:
            if next(iter(cache)) in self._dirty:
                self.write_back()
            cache.popitem(last=False)

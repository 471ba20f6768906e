"""How much memory a container's RocksDB stores may take, and the memory they share.

RocksDB's memory is native: Python's view of the process never sees it, and an executor sized for the JVM and a
little Python is killed (or, under ``spark.executor.pyspark.memory``'s address-space limit, aborts natively) once
block caches and memtables grow. So every RocksDB store's memory is bounded by config and the bound is added up
here, per container, for the sizing check at start (``job.container.memory.mb``):

* per store (default): its block cache ``stores.<s>.container.cache.size.bytes`` plus its memtables
  ``container.write.buffer.size.bytes`` x ``rocksdb.num.write.buffers``, both split between the container's
  tasks, so a store's share does not depend on how many tasks the container has;
* container-wide (``job.container.rocksdb.memory.mb``): one block cache for every store of the container, with
  the memtables charged to it by a write buffer manager, so the whole of RocksDB's cache and memtables stays
  within the one figure (RocksDB's cache limit is soft: a burst of pinned blocks may briefly exceed it).

The shared cache is per Python process: on Spark a process runs one container at a time, so it is the
container's; the in-process runner's containers, threads of one process, share one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import rocksdict

from millstream.config.settings import Settings
from millstream.config.views import StoreConfig, store_names

MIB = 1024 * 1024
ROCKSDB_FACTORY = "millstream.storage.rocksdb:RocksDbStorageEngineFactory"
ROCKSDB_FACTORY_NAMES = frozenset(
    {"rocksdb", "org.apache.samza.storage.kv.RocksDbKeyValueStorageEngineFactory", ROCKSDB_FACTORY}
)
SHARED_WRITE_BUFFER_SHARE = 0.5
"""Part of the shared budget memtables may hold before the write buffer manager flushes: the rest serves reads."""


@dataclass(frozen=True)
class RocksDbBudget:
    """A container's RocksDB memory: bytes per store (or the one shared figure), and what they add up to."""

    parts: dict[str, int]
    """What each part may take, by the config key (or store) that sets it."""

    @property
    def total_bytes(self) -> int:
        return sum(self.parts.values())

    @property
    def total_mb(self) -> float:
        return self.total_bytes / MIB

    def describe(self) -> str:
        return ", ".join(f"{name} {size / MIB:g} MiB" for name, size in self.parts.items()) or "no RocksDB stores"


def store_budget_bytes(config: StoreConfig) -> int:
    """A RocksDB store's block cache and memtables per container (both split between the tasks)."""
    memtables = config.container_write_buffer_size_bytes * config.rocksdb_num_write_buffers
    return config.container_cache_size_bytes + memtables


def rocksdb_store_names(config: Settings) -> list[str]:
    """Stores (task and adjunct) whose engine is RocksDB."""
    return [name for name in store_names(config) if config.view(StoreConfig, name).factory in ROCKSDB_FACTORY_NAMES]


def rocksdb_budget(config: Settings) -> RocksDbBudget:
    """The container's RocksDB memory by config: the shared limit when set, else each store's cache + memtables."""
    stores = rocksdb_store_names(config)
    if not stores:
        return RocksDbBudget({})
    shared = config.job.container_rocksdb_memory_mb
    if shared is not None:
        return RocksDbBudget({"job.container.rocksdb.memory.mb": shared * MIB})
    return RocksDbBudget({f"store '{name}'": store_budget_bytes(config.view(StoreConfig, name)) for name in stores})


@dataclass(frozen=True)
class SharedRocksDbMemory:
    """One block cache with the memtables charged to it: every store of the container opens with both."""

    cache: rocksdict.Cache
    write_buffer_manager: rocksdict.WriteBufferManager
    capacity_bytes: int


@functools.lru_cache(maxsize=4)
def shared_rocksdb_memory(capacity_bytes: int) -> SharedRocksDbMemory:
    """The process's shared RocksDB memory of ``capacity_bytes`` (one object per capacity, made once)."""
    cache = rocksdict.Cache(capacity_bytes)
    manager = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
        int(capacity_bytes * SHARED_WRITE_BUFFER_SHARE), False, cache
    )
    return SharedRocksDbMemory(cache, manager, capacity_bytes)


def container_rocksdb_memory(config: Settings) -> SharedRocksDbMemory | None:
    """The shared memory ``job.container.rocksdb.memory.mb`` asks for, or None: each store has its own."""
    shared = config.job.container_rocksdb_memory_mb
    return None if shared is None else shared_rocksdb_memory(shared * MIB)

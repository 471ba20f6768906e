"""Choose a store's engine from ``stores.<s>.factory``: ``rocksdb`` (default), ``inmemory``, Samza's
factory class names, or ``module:Class`` of any class with ``persistent`` and ``get_storage_engine``."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from millstream.config.settings import Settings
from millstream.config.views import StoreConfig
from millstream.errors import ConfigError
from millstream.plugins import load_object
from millstream.storage.kv import KeyValueStorageEngine

STORE_FACTORIES = {
    "rocksdb": "millstream.storage.rocksdb:RocksDbStorageEngineFactory",
    "inmemory": "millstream.storage.inmemory:InMemoryStorageEngineFactory",
    "org.apache.samza.storage.kv.RocksDbKeyValueStorageEngineFactory": (
        "millstream.storage.rocksdb:RocksDbStorageEngineFactory"
    ),
    "org.apache.samza.storage.kv.inmemory.InMemoryKeyValueStorageEngineFactory": (
        "millstream.storage.inmemory:InMemoryStorageEngineFactory"
    ),
}


class StorageEngineFactory(Protocol):
    """Builds one task's engine of a store. A factory whose engines hold files may also say how many descriptors one
    engine holds, ``open_files(config) -> (descriptors, bounded)``, which the container's check of ``ulimit -n``
    counts (``storage/open_files.py``); one without it is not counted."""

    persistent: bool
    """True when the engine keeps its data in ``store_dir`` (and can be checkpointed there)."""

    def get_storage_engine(
        self, store_name: str, store_dir: Path, config: StoreConfig, tasks_in_container: int = 1
    ) -> KeyValueStorageEngine: ...


def storage_engine_factory(config: Settings, store: str) -> StorageEngineFactory:
    key = f"stores.{store}.factory"
    name = config.view(StoreConfig, store).factory
    factory_class = load_object(name, key, STORE_FACTORIES)
    try:
        # a factory that needs more than its store's keys (the container's shared RocksDB memory) reads the config
        from_config = getattr(factory_class, "from_config", None)
        factory = from_config(config) if callable(from_config) else factory_class()
    except Exception as error:
        raise ConfigError(f"config key '{key}': cannot create '{name}': {error}") from None
    if not (hasattr(factory, "get_storage_engine") and isinstance(getattr(factory, "persistent", None), bool)):
        raise ConfigError(f"config key '{key}': '{name}' is not a storage engine factory")
    return factory

"""The descriptors a container's stores may hold open, for the container's check of ``ulimit -n`` at start.

A RocksDB store keeps every table file open unless ``stores.<s>.rocksdb.max.open.files`` bounds it, so a container
of a thousand tasks with a store each holds thousands of descriptors: more than the soft limit many hosts start
processes with (1,024). A JVM raises its soft limit to the hard one at start (HotSpot's ``MaxFDLimit``), so Samza's
containers, and a Spark executor's Python workers, which inherit it, never meet that soft limit; a Python process
does not. The container therefore reserves its stores' descriptors beside its systems' budgets (``runtime/
file_limit.py``), which raises the soft limit or fails at start naming the keys, and raises the soft limit to the
hard one when a store's table files are unbounded, whose count nothing knows in advance.

A store factory says what one store holds with ``open_files(config) -> (descriptors, bounded)``; a factory
without it (an in-memory store, a plugin) is left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from millstream.config.settings import Settings
from millstream.config.views import StoreConfig
from millstream.contracts.systems import FileBudget
from millstream.storage.factory import storage_engine_factory


@dataclass(frozen=True)
class StoreFiles:
    """What a container's stores may hold open: ``budget`` (None: no store says), and the stores whose table files
    have no bound, so that they may hold more than their share of ``budget`` as they grow."""

    budget: FileBudget | None
    unbounded: tuple[str, ...]


def store_files(config: Settings, stores: Iterable[str], tasks: int) -> StoreFiles:
    """The descriptors ``tasks`` tasks' copies of ``stores`` hold open at most (at least, for unbounded ones), with
    each counted store's ``stores.<s>.rocksdb.max.open.files`` as the keys a message about the limit names."""
    descriptors, keys, unbounded = 0, [], []
    for store in stores:
        open_files = getattr(storage_engine_factory(config, store), "open_files", None)
        if not callable(open_files):
            continue
        per_store, bounded = open_files(config.view(StoreConfig, store))
        descriptors += tasks * per_store
        keys.append(f"stores.{store}.rocksdb.max.open.files")
        if not bounded:
            unbounded.append(store)
    return StoreFiles(FileBudget(descriptors, tuple(keys)) if keys else None, tuple(unbounded))

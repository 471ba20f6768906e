"""Fixtures shared by the store tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.storage.inmemory import InMemoryKeyValueStorageEngine
from millstream.storage.kv import KeyValueStorageEngine
from millstream.storage.rocksdb import RocksDbKeyValueStorageEngine


@pytest.fixture(params=["rocksdb", "inmemory"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KeyValueStorageEngine]:
    """Each storage engine in turn: what a store promises holds for both."""
    engine: KeyValueStorageEngine = (
        RocksDbKeyValueStorageEngine(tmp_path / "store")
        if request.param == "rocksdb"
        else InMemoryKeyValueStorageEngine()
    )
    yield engine
    engine.close()

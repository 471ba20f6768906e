"""What a container's stores may hold open, for its ``ulimit -n`` check: each RocksDB store's bound, or its fixed
descriptors and the note that it has no bound; RocksDB's own count of an open store's descriptors; and a store that
cannot open for want of descriptors says which limit and key to change."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.config.settings import Settings
from millstream.config.views import StoreConfig
from millstream.errors import ConfigError
from millstream.storage.errors import StoreError
from millstream.storage.open_files import store_files
from millstream.storage.rocksdb import (
    ROCKSDB_FIXED_DESCRIPTORS,
    RocksDbKeyValueStorageEngine,
    RocksDbStorageEngineFactory,
)


def held_under(directory: Path) -> list[str]:
    """The names of the files and directories under ``directory`` this process holds a descriptor of."""
    names = []
    for descriptor in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{descriptor}")
        except OSError:  # closed since the listing
            continue
        if target.startswith(str(directory)):
            names.append(Path(target).name)
    return names


def test_an_open_rocksdb_store_holds_its_fixed_descriptors_and_one_per_table_file(tmp_path: Path) -> None:
    engine = RocksDbKeyValueStorageEngine(tmp_path / "store", write_buffer_size=64 * 1024)
    try:
        assert len(held_under(tmp_path)) == ROCKSDB_FIXED_DESCRIPTORS
        for key in range(3):
            engine.put(b"k%d" % key, b"v")
            engine.flush()
        tables = [name for name in held_under(tmp_path) if name.endswith(".sst")]
        assert len(tables) == 3 and len(held_under(tmp_path)) == ROCKSDB_FIXED_DESCRIPTORS + 3
    finally:
        engine.close()


def test_a_bound_on_a_stores_open_files_reaches_rocksdb(tmp_path: Path) -> None:
    config = StoreConfig.parse({"rocksdb.max.open.files": "50"}, "stores.s.")
    engine = RocksDbStorageEngineFactory().get_storage_engine("s", tmp_path / "store", config)
    engine.close()
    options = max((tmp_path / "store").glob("OPTIONS-*")).read_text()
    assert "max_open_files=50\n" in options
    with pytest.raises(ConfigError, match=r"stores\.s\.rocksdb\.max\.open\.files.*at least 20"):
        StoreConfig.parse({"rocksdb.max.open.files": "5"}, "stores.s.")


def test_the_containers_stores_budget_their_bounds_or_their_fixed_files_and_name_the_unbounded_ones() -> None:
    config = Settings(
        {
            "job.name": "files",
            "stores.open.factory": "rocksdb",
            "stores.bounded.factory": "rocksdb",
            "stores.bounded.rocksdb.max.open.files": "50",
            "stores.memory.factory": "inmemory",
        }
    )
    files = store_files(config, ["open", "bounded", "memory"], tasks=10)
    assert files.budget is not None
    assert files.budget.descriptors == 10 * (ROCKSDB_FIXED_DESCRIPTORS + 1) + 10 * 50
    assert files.budget.keys == ("stores.open.rocksdb.max.open.files", "stores.bounded.rocksdb.max.open.files")
    assert files.unbounded == ("open",)
    assert store_files(config, ["memory"], tasks=10).budget is None, "an in-memory store holds no files"


def limit_leaving_free(free: int) -> int:
    """The soft limit under which this process can open ``free`` more files: a new descriptor takes the lowest free
    number, and the limit bounds the numbers, not how many are open (a worker may hold numbers far above the rest)."""
    held = {int(name) for name in os.listdir("/proc/self/fd")}
    number = 0
    while free:
        free -= number not in held
        number += 1
    return number


@pytest.fixture
def limit() -> Iterator[tuple[int, int]]:
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield before
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_a_store_that_cannot_open_for_want_of_descriptors_names_the_limit_and_the_key(
    limit: tuple[int, int], tmp_path: Path
) -> None:
    _, hard = limit
    (tmp_path / "store").mkdir()
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit_leaving_free(2), hard))
    with pytest.raises(
        StoreError, match=r"Too many open files.*ulimit -n, is \d+, at most .*rocksdb\.max\.open\.files"
    ):
        RocksDbKeyValueStorageEngine(tmp_path / "store")

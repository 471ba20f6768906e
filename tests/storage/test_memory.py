"""The RocksDB memory budget by config, and the bounds actually applied to the stores RocksDB opens."""

from __future__ import annotations

import glob
from pathlib import Path

from millstream.config.settings import Settings
from millstream.config.views import StoreConfig
from millstream.storage.factory import storage_engine_factory
from millstream.storage.memory import MIB, rocksdb_budget, shared_rocksdb_memory
from millstream.storage.rocksdb import RocksDbKeyValueStorageEngine, RocksDbStorageEngineFactory


def _config(**extra: str) -> Settings:
    values = {"stores.counts.changelog": "log.counts-changelog", "stores.cache.factory": "inmemory"}
    values.update({key.replace("__", "."): value for key, value in extra.items()})
    return Settings(values)


def _options_file(path: Path) -> dict[str, str]:
    newest = sorted(glob.glob(str(path / "OPTIONS-*")))[-1]
    options: dict[str, str] = {}
    for line in Path(newest).read_text().splitlines():
        key, sep, value = line.strip().partition("=")
        if sep:
            options.setdefault(key, value)
    return options


def test_a_stores_budget_is_its_block_cache_plus_its_memtables_and_in_memory_stores_count_nothing():
    config = _config(
        stores__counts__container__cache__size__bytes=str(50 * MIB),
        stores__counts__container__write__buffer__size__bytes=str(8 * MIB),
        stores__counts__rocksdb__num__write__buffers="2",
        stores__totals__factory="rocksdb",
    )
    budget = rocksdb_budget(config)
    # counts: 50 + 8 x 2; totals: Samza's defaults 100 MB cache + 32 MB x 3 memtables; cache (in memory): nothing
    assert budget.parts == {"store 'counts'": 66 * MIB, "store 'totals'": 196 * MIB}
    assert budget.total_mb == 262


def test_a_container_wide_rocksdb_limit_replaces_the_per_store_budgets():
    config = _config(job__container__rocksdb__memory__mb="300", stores__totals__factory="rocksdb")
    assert rocksdb_budget(config).parts == {"job.container.rocksdb.memory.mb": 300 * MIB}


def test_a_job_without_rocksdb_stores_has_no_rocksdb_budget_even_with_a_container_wide_limit():
    assert rocksdb_budget(Settings({"job.container.rocksdb.memory.mb": "300"})).total_bytes == 0


def test_a_store_opens_with_its_configured_memtables_split_between_the_containers_tasks(tmp_path):
    config = _config(
        stores__counts__container__write__buffer__size__bytes=str(8 * MIB),
        stores__counts__rocksdb__num__write__buffers="2",
    )
    factory = storage_engine_factory(config, "counts")
    engine = factory.get_storage_engine("counts", tmp_path / "counts", config.view(StoreConfig, "counts"), 4)
    engine.close()
    options = _options_file(tmp_path / "counts")
    assert options["write_buffer_size"] == str(2 * MIB)
    assert options["max_write_buffer_number"] == "2"


def test_a_store_with_no_block_cache_configured_opens_without_one(tmp_path):
    config = _config(stores__counts__container__cache__size__bytes="0")
    factory = storage_engine_factory(config, "counts")
    engine = factory.get_storage_engine("counts", tmp_path / "counts", config.view(StoreConfig, "counts"))
    engine.close()
    assert _options_file(tmp_path / "counts")["no_block_cache"] == "true"


def _fill_and_read(engine: RocksDbKeyValueStorageEngine, prefix: bytes) -> None:
    engine.put_all((prefix + b"%06d" % i, b"v" * 200) for i in range(5000))
    engine.flush()
    for i in range(5000):
        assert engine.get(prefix + b"%06d" % i) == b"v" * 200


def test_under_a_container_wide_limit_every_store_reads_through_one_shared_cache_that_also_holds_memtables(tmp_path):
    config = _config(job__container__rocksdb__memory__mb="64", stores__totals__factory="rocksdb")
    shared = shared_rocksdb_memory(64 * MIB)
    counts = storage_engine_factory(config, "counts")
    totals = storage_engine_factory(config, "totals")
    assert isinstance(counts, RocksDbStorageEngineFactory) and counts.shared_memory is shared
    assert isinstance(totals, RocksDbStorageEngineFactory) and totals.shared_memory is shared
    first = counts.get_storage_engine("counts", tmp_path / "counts", config.view(StoreConfig, "counts"))
    second = totals.get_storage_engine("totals", tmp_path / "totals", config.view(StoreConfig, "totals"))
    assert isinstance(first, RocksDbKeyValueStorageEngine) and isinstance(second, RocksDbKeyValueStorageEngine)
    try:
        before = shared.cache.get_usage()
        first.put(b"k", b"v" * 1000)
        assert shared.write_buffer_manager.get_usage() > 0  # the memtable is charged to the shared limit
        _fill_and_read(first, b"a")
        after_first = shared.cache.get_usage()
        _fill_and_read(second, b"b")
        after_second = shared.cache.get_usage()
        assert before < after_first < after_second  # the second store's blocks went into the same cache
        assert after_second <= shared.capacity_bytes
    finally:
        first.close()
        second.close()


def test_without_a_container_wide_limit_each_store_has_its_own_cache(tmp_path):
    config = _config()
    factory = storage_engine_factory(config, "counts")
    assert isinstance(factory, RocksDbStorageEngineFactory) and factory.shared_memory is None

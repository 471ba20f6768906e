"""Key-value stores as a task sees them, on both engines: the API, key order, snapshots, serdes, and
errors that name the task and store."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream.config.views import RocksDbCompactionStyle
from millstream.serde.builtin import JsonSerde, StringSerde
from millstream.storage.errors import StoreError
from millstream.storage.inmemory import InMemoryKeyValueStorageEngine
from millstream.storage.kv import KeyValueStorageEngine, TaskKeyValueStore
from millstream.storage.rocksdb import InfoLogBound, RocksDbKeyValueStorageEngine, StoreTuning, _file_opening_threads
from millstream.storage.small_tables import SMALL_TABLES_MAX


@pytest.fixture
def store(engine: KeyValueStorageEngine) -> TaskKeyValueStore:
    return TaskKeyValueStore("Partition 0", "counts", engine, StringSerde(), JsonSerde())


def test_put_get_delete(store: TaskKeyValueStore) -> None:
    assert store.get("a") is None
    store.put("a", {"n": 1})
    assert store.get("a") == {"n": 1}
    store.delete("a")
    assert store.get("a") is None


def test_putting_none_deletes(store: TaskKeyValueStore) -> None:
    store.put("a", 1)
    store.put("a", None)
    assert store.get("a") is None


def test_put_all_and_get_all_leave_out_absent_keys(store: TaskKeyValueStore) -> None:
    store.put_all({"a": 1, "b": 2})
    store.put_all([("c", 3), ("a", None)])
    assert store.get_all(["a", "b", "c", "zz"]) == {"b": 2, "c": 3}


def test_delete_all(store: TaskKeyValueStore) -> None:
    store.put_all({"a": 1, "b": 2, "c": 3})
    store.delete_all(["a", "c"])
    assert list(store.all()) == [("b", 2)]


def test_range_is_from_inclusive_to_exclusive_in_key_byte_order(store: TaskKeyValueStore) -> None:
    for key in ["d", "a", "c", "b", "e"]:
        store.put(key, key.upper())
    assert list(store.range("b", "e")) == [("b", "B"), ("c", "C"), ("d", "D")]
    assert list(store.range("x", "z")) == []
    assert [key for key, _ in store.all()] == ["a", "b", "c", "d", "e"]


def test_order_follows_serialized_bytes_not_python_order(engine: KeyValueStorageEngine) -> None:
    store = TaskKeyValueStore("t", "s", engine)
    for key in [b"\x01", b"\xff", b"\x00\x05", b"\x00"]:
        store.put(key, b"v")
    assert [key for key, _ in store.all()] == [b"\x00", b"\x00\x05", b"\x01", b"\xff"]


def test_snapshot_is_consistent_and_re_iterable(store: TaskKeyValueStore) -> None:
    store.put_all({"a": 1, "b": 2, "c": 3})
    with store.snapshot("a", "c") as snapshot:
        store.put("a", 100)
        store.put("b2", 5)
        store.delete("b")
        assert list(snapshot) == [("a", 1), ("b", 2)]
        assert list(snapshot) == [("a", 1), ("b", 2)]
    with store.snapshot() as everything:
        assert list(everything) == [("a", 100), ("b2", 5), ("c", 3)]


def test_range_iterator_sees_the_store_as_it_was_when_created(store: TaskKeyValueStore) -> None:
    store.put_all({"a": 1, "b": 2})
    iterator = store.range("a", "z")
    store.put("c", 3)
    assert list(iterator) == [("a", 1), ("b", 2)]


def test_every_change_reaches_the_changelog_writer_as_bytes(engine: KeyValueStorageEngine) -> None:
    changes: list[tuple[bytes, bytes | None]] = []
    store = TaskKeyValueStore("t", "s", engine, StringSerde(), JsonSerde(), lambda k, v: changes.append((k, v)))
    store.put("a", 1)
    store.put_all({"b": 2, "a": None})
    store.delete("b")
    assert changes == [(b"a", b"1"), (b"b", b"2"), (b"a", None), (b"b", None)]


def test_writes_mark_the_store_dirty(store: TaskKeyValueStore) -> None:
    assert not store.dirty
    store.get("a")
    assert not store.dirty
    store.put("a", 1)
    assert store.dirty


def test_without_serdes_keys_and_values_must_be_bytes(engine: KeyValueStorageEngine) -> None:
    store = TaskKeyValueStore("Partition 3", "raw", engine)
    store.put(b"k", b"v")
    assert store.get(b"k") == b"v"
    with pytest.raises(StoreError, match=r"task 'Partition 3' store 'raw': cannot serialize the value"):
        store.put(b"k", "text")


def test_none_keys_are_refused_naming_task_and_store(store: TaskKeyValueStore) -> None:
    with pytest.raises(StoreError, match=r"task 'Partition 0' store 'counts': keys cannot be None"):
        store.put(None, 1)


def test_unserializable_values_name_task_and_store(store: TaskKeyValueStore) -> None:
    with pytest.raises(StoreError, match=r"task 'Partition 0' store 'counts': cannot serialize the key"):
        store.put(5, 1)


def test_a_batch_of_columns_is_written_in_order_with_none_values_deleting(engine: KeyValueStorageEngine) -> None:
    engine.put(b"old", b"0")
    engine.put_columns([b"a", b"b", b"a", b"old"], [b"1", b"2", b"3", None])
    assert list(engine.all()) == [(b"a", b"3"), (b"b", b"2")]


def test_a_batch_of_columns_skips_records_without_a_key_and_deletes_after_a_put(
    engine: KeyValueStorageEngine,
) -> None:
    engine.put_columns([b"a", None, b"b", b"a", b"c"], [b"1", b"x", b"2", None, b"3"])
    assert list(engine.all()) == [(b"b", b"2"), (b"c", b"3")]


def test_a_batch_of_columns_of_nothing_writes_nothing(engine: KeyValueStorageEngine) -> None:
    engine.put_columns([], [])
    assert list(engine.all()) == []


def test_rocksdb_checkpoint_is_a_consistent_copy_by_hard_links(tmp_path: Path) -> None:
    engine = RocksDbKeyValueStorageEngine(tmp_path / "store")
    engine.put_all([(b"k%d" % i, b"v") for i in range(1000)])
    engine.checkpoint(tmp_path / "store-1-1")
    engine.put(b"after", b"x")
    sst = [p for p in (tmp_path / "store-1-1").iterdir() if p.suffix == ".sst"]
    assert sst and all(p.stat().st_nlink >= 2 for p in sst)
    engine.close()
    copy = RocksDbKeyValueStorageEngine(tmp_path / "store-1-1")
    assert copy.get(b"k999") == b"v" and copy.get(b"after") is None
    copy.close()


@pytest.mark.parametrize("style", ["level", "universal"])
def test_a_rocksdb_store_flushed_at_every_commit_with_ascending_keys_keeps_a_bounded_number_of_table_files(
    tmp_path: Path, style: RocksDbCompactionStyle
) -> None:
    """Each flush of keys beyond every earlier one makes a table file that RocksDB's compaction moves down without
    merging: 200 flushes left 200 files, all held open. The flushes now merge the small ones (every key kept), in
    either compaction style."""
    engine = RocksDbKeyValueStorageEngine(tmp_path / "store", tuning=StoreTuning(compaction_style=style))
    for commit in range(200):
        engine.put_all([(b"%08d-%d" % (commit, i), b"v" * 16) for i in range(3)])
        engine.flush()
    tables = sorted(path for path in (tmp_path / "store").iterdir() if path.suffix == ".sst")
    assert 0 < len(tables) <= SMALL_TABLES_MAX + 1
    assert [key for key, _ in engine.all()] == [b"%08d-%d" % (commit, i) for commit in range(200) for i in range(3)]
    engine.close()


def test_rocksdb_opens_an_existing_store_with_the_options_it_is_given_not_those_its_files_recorded(
    tmp_path: Path,
) -> None:
    """A store opened on files another opener wrote (a local checkpoint copied into place, a blob-store download,
    a container with more tasks now) gets this container's memtable size, not the one its OPTIONS file holds."""
    store = tmp_path / "store"
    first = RocksDbKeyValueStorageEngine(store, write_buffer_size=1 << 20, cache_size=0)
    first.put(b"k", b"v")
    first.close()
    second = RocksDbKeyValueStorageEngine(store, write_buffer_size=2 << 20, cache_size=0)
    assert second.get(b"k") == b"v"
    second.close()
    newest = max(store.glob("OPTIONS-*"), key=lambda path: int(path.name.split("-")[1]))
    assert "write_buffer_size=2097152" in newest.read_text().split()


def _recorded_option(store: Path, name: str) -> str:
    newest = max(store.glob("OPTIONS-*"), key=lambda path: int(path.name.split("-")[1]))
    return next(word.split("=", 1)[1] for word in newest.read_text().split() if word.startswith(f"{name}="))


def test_a_new_rocksdb_store_opens_its_files_without_starting_threads(tmp_path: Path) -> None:
    """RocksDB's default starts 16 threads at every open to load table files, even for an empty store: a
    container opening a store per task paid 15 thread starts per task."""
    engine = RocksDbKeyValueStorageEngine(tmp_path / "store")
    engine.close()
    assert _recorded_option(tmp_path / "store", "max_file_opening_threads") == "1"


def test_a_store_of_many_table_files_opens_them_in_parallel_up_to_rocksdbs_default(tmp_path: Path) -> None:
    assert _file_opening_threads(tmp_path / "absent") == 1
    for index in range(40):
        (tmp_path / f"{index:06d}.sst").touch()
    (tmp_path / "MANIFEST-000001").touch()
    assert _file_opening_threads(tmp_path) == 2
    for index in range(40, 1000):
        (tmp_path / f"{index:06d}.sst").touch()
    assert _file_opening_threads(tmp_path) == 16


def test_inmemory_engine_cannot_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not persistent"):
        InMemoryKeyValueStorageEngine().checkpoint(tmp_path / "x")


def test_rocksdb_memtables_split_the_container_write_buffer_between_tasks(tmp_path: Path, monkeypatch) -> None:
    from millstream.config.views import StoreConfig
    from millstream.storage import rocksdb

    captured: dict[str, int] = {}

    def engine(path: Path, size: int, buffers: int, **memory: object) -> None:
        captured.update(size=size, buffers=buffers)

    monkeypatch.setattr(rocksdb, "RocksDbKeyValueStorageEngine", engine)
    config = StoreConfig.parse({"container.write.buffer.size.bytes": str(8 << 20)}, "stores.s.")
    rocksdb.RocksDbStorageEngineFactory().get_storage_engine("s", tmp_path, config, tasks_in_container=4)
    assert captured == {"size": 2 << 20, "buffers": 3}


def test_a_stores_info_log_bound_comes_from_samzas_keys_with_samzas_defaults(tmp_path: Path, monkeypatch) -> None:
    from millstream.config.views import StoreConfig
    from millstream.errors import ConfigError
    from millstream.storage import rocksdb

    captured: list[object] = []

    def engine(path: Path, size: int, buffers: int, *, tuning: StoreTuning, **options: object) -> None:
        captured.append(tuning.info_log)

    monkeypatch.setattr(rocksdb, "RocksDbKeyValueStorageEngine", engine)
    factory = rocksdb.RocksDbStorageEngineFactory()
    keys = {"rocksdb.max.log.file.size.bytes": str(1 << 20), "rocksdb.keep.log.file.num": "3"}
    factory.get_storage_engine("s", tmp_path, StoreConfig.parse(keys, "stores.s."))
    factory.get_storage_engine("s", tmp_path, StoreConfig.parse({}, "stores.s."))
    assert captured == [InfoLogBound(1 << 20, 3), InfoLogBound(64 << 20, 2)]
    with pytest.raises(ConfigError, match=r"stores\.s\.rocksdb\.keep\.log\.file\.num"):
        StoreConfig.parse({"rocksdb.keep.log.file.num": "0"}, "stores.s.")


def test_a_rocksdb_stores_info_log_is_rolled_at_its_size_and_keeps_its_file_count_across_flushes_and_reopens(
    tmp_path: Path,
) -> None:
    """RocksDB's own defaults never roll the log while the store is open and keep 1,000 files: here each flush
    logged about 6 KB, so 60 flushes made a 370 KB log, and each reopen one more file."""
    bound = InfoLogBound(max_file_size=32 * 1024, files=2)
    for session in range(3):
        engine = RocksDbKeyValueStorageEngine(
            tmp_path / "store", write_buffer_size=64 * 1024, tuning=StoreTuning(info_log=bound)
        )
        for key in range(60):
            engine.put_all([(b"k%06d" % (session * 1_000 + key), b"v" * 16)])
            engine.flush()
        engine.close()
    logs = [path for path in (tmp_path / "store").iterdir() if path.name.startswith("LOG")]
    assert 1 <= len(logs) <= bound.files
    assert all(path.stat().st_size < 2 * bound.max_file_size for path in logs)


def test_a_small_write_buffer_still_keeps_every_write(tmp_path: Path) -> None:
    engine = RocksDbKeyValueStorageEngine(tmp_path / "store", write_buffer_size=64 * 1024, write_buffers=2)
    engine.put_all([(b"k%06d" % i, b"v" * 100) for i in range(20_000)])
    engine.checkpoint(tmp_path / "store-1-1")
    engine.close()
    copy = RocksDbKeyValueStorageEngine(tmp_path / "store-1-1")
    assert sum(1 for _ in copy.all()) == 20_000
    copy.close()


@pytest.mark.parametrize("compression", ["zstd", "none"])
def test_a_stores_compression_and_block_size_reach_rocksdb_and_its_data_reads_back_after_a_reopen(
    tmp_path: Path, compression: str
) -> None:
    """Samza's keys: the table files are written with the configured compression and block size."""
    from millstream.config.views import StoreConfig
    from millstream.storage.rocksdb import RocksDbStorageEngineFactory

    keys = {"rocksdb.compression": compression, "rocksdb.block.size.bytes": "16384"}
    config = StoreConfig.parse(keys, "stores.s.")
    engine = RocksDbStorageEngineFactory().get_storage_engine("s", tmp_path / "store", config)
    engine.put_all([(b"k%05d" % key, b"v" * 100) for key in range(2_000)])
    engine.flush()
    engine.close()
    options = max((tmp_path / "store").glob("OPTIONS-*")).read_text()
    expected = {"zstd": "kZSTD", "none": "kNoCompression"}[compression]
    assert f"  compression={expected}\n" in options and "  block_size=16384\n" in options
    engine = RocksDbStorageEngineFactory().get_storage_engine("s", tmp_path / "store", config)
    try:
        assert engine.get(b"k01999") == b"v" * 100
    finally:
        engine.close()


def test_an_unknown_compression_or_a_tiny_block_size_is_refused_naming_the_key() -> None:
    from millstream.config.views import StoreConfig
    from millstream.errors import ConfigError

    with pytest.raises(ConfigError, match=r"stores\.s\.rocksdb\.compression"):
        StoreConfig.parse({"rocksdb.compression": "brotli"}, "stores.s.")
    with pytest.raises(ConfigError, match=r"stores\.s\.rocksdb\.block\.size\.bytes"):
        StoreConfig.parse({"rocksdb.block.size.bytes": "100"}, "stores.s.")


@pytest.mark.parametrize(("first", "then"), [("level", "universal"), ("universal", "level")])
def test_a_stores_compaction_style_reaches_rocksdb_and_a_store_written_in_the_other_style_keeps_every_key(
    tmp_path: Path, first: str, then: str
) -> None:
    """Samza's ``rocksdb.compaction.style``: the store compacts in the configured style, and a store whose files
    were written in the other one (the key changed between two runs of the job) opens with every key."""
    from millstream.config.views import StoreConfig
    from millstream.storage.rocksdb import RocksDbStorageEngineFactory

    recorded = {"level": "kCompactionStyleLevel", "universal": "kCompactionStyleUniversal"}
    for run, style in enumerate([first, then]):
        config = StoreConfig.parse({"rocksdb.compaction.style": style}, "stores.s.")
        engine = RocksDbStorageEngineFactory().get_storage_engine("s", tmp_path / "store", config)
        try:
            for flush in range(12):
                engine.put_all([(b"k%d-%02d-%03d" % (run, flush, key), b"v" * 100) for key in range(200)])
                engine.flush()
            assert _recorded_option(tmp_path / "store", "compaction_style") == recorded[style]
            assert sum(1 for _ in engine.all()) == (run + 1) * 12 * 200
        finally:
            engine.close()


def test_samzas_fifo_compaction_is_refused_naming_the_key_and_why() -> None:
    from millstream.config.views import StoreConfig
    from millstream.errors import ConfigError

    with pytest.raises(ConfigError, match=r"stores\.s\.rocksdb\.compaction\.style.*deletes the oldest table files"):
        StoreConfig.parse({"rocksdb.compaction.style": "fifo"}, "stores.s.")
    with pytest.raises(ConfigError, match=r"stores\.s\.rocksdb\.compaction\.style.*'level' or 'universal'"):
        StoreConfig.parse({"rocksdb.compaction.style": "tiered"}, "stores.s.")

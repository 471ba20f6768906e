"""Loading a RocksDB store that starts empty: keys in order stay in the normal memtable, keys out of order go
through a vector memtable, and either way the store then holds exactly what write batches would have made it,
open with its normal options."""

from __future__ import annotations

import random
from pathlib import Path

from millstream.storage.bulk_load import VectorMemtableLoader
from millstream.storage.rocksdb import RocksDbKeyValueStorageEngine


def recorded_option(store: Path, name: str) -> str:
    """An option the store was last opened with, as RocksDB recorded it in its newest OPTIONS file."""
    newest = max(store.glob("OPTIONS-*"), key=lambda path: int(path.name.split("-")[1]))
    (line,) = [line.strip() for line in newest.read_text().splitlines() if line.strip().startswith(f"{name}=")]
    return line.removeprefix(f"{name}=")


def memtable_factory(store: Path) -> str:
    return recorded_option(store, "memtable_factory")


def key(i: int) -> bytes:
    return b"k%06d" % i


def test_keys_in_order_stay_in_the_normal_memtable(tmp_path: Path) -> None:
    engine = RocksDbKeyValueStorageEngine(tmp_path / "store", 64 * 1024)
    loader = VectorMemtableLoader(engine)
    for start in range(0, 3000, 1000):
        keys = [key(i) for i in range(start, start + 1000)]
        loader.put_columns(keys, [b"v"] * len(keys), len(keys))
        assert not engine.vector_memtable
    assert loader.finish() == 0
    assert [k for k, _ in engine.all()] == [key(i) for i in range(3000)]
    engine.close()


def test_keys_out_of_order_go_through_a_vector_memtable_from_the_first_batch_that_is(tmp_path: Path) -> None:
    """Repeats (the last write wins) and tombstones, over more than one memtable's worth (flushed as they
    fill): the store holds exactly what the writes in order make, and is back on its normal options after."""
    store = tmp_path / "store"
    engine = RocksDbKeyValueStorageEngine(store, 64 * 1024)
    loader = VectorMemtableLoader(engine)
    loader.put_columns([key(0), key(1)], [b"first", b"first"], 10)  # ascending: the normal memtable
    assert not engine.vector_memtable
    shuffled = list(range(20_000))
    random.Random(5).shuffle(shuffled)
    expected = {key(0): b"first", key(1): b"first"}
    for start in range(0, len(shuffled), 1000):
        chunk = shuffled[start : start + 1000]
        keys: list[bytes | None] = [key(i % 5000) for i in chunk]  # each key written about four times
        values: list[bytes | None] = [None if i % 7 == 0 else b"v%d" % i for i in chunk]  # tombstones
        loader.put_columns(keys, values, 1000)
        assert engine.vector_memtable
        for k, v in zip(keys, values, strict=True):
            assert k is not None
            if v is None:
                expected.pop(k, None)
            else:
                expected[k] = v
    assert memtable_factory(store).startswith("{id=VectorRepFactory")
    assert recorded_option(store, "max_background_jobs") == "8", "two flush threads sort the full memtables"
    assert loader.finish() == 20_000
    assert not engine.vector_memtable
    assert memtable_factory(store) == "SkipListFactory"
    assert recorded_option(store, "max_background_jobs") == "2"
    assert dict(engine.all()) == expected
    engine.put(b"after", b"1")  # the store reads and writes normally
    engine.delete(key(1))
    assert engine.get(b"after") == b"1" and engine.get(key(1)) is None
    engine.close()


def test_a_keyless_record_is_skipped_and_takes_the_vector_memtable(tmp_path: Path) -> None:
    engine = RocksDbKeyValueStorageEngine(tmp_path / "store")
    loader = VectorMemtableLoader(engine)
    loader.put_columns([key(1), None, key(2)], [b"a", b"b", None], 2)
    assert engine.vector_memtable
    assert loader.finish() == 3
    assert dict(engine.all()) == {key(1): b"a"}
    engine.close()


def test_an_aborted_load_leaves_the_store_on_its_normal_options(tmp_path: Path) -> None:
    store = tmp_path / "store"
    engine = RocksDbKeyValueStorageEngine(store)
    loader = VectorMemtableLoader(engine)
    loader.put_columns([key(2), key(1)], [b"a", b"b"], 2)
    assert engine.vector_memtable
    loader.abort()
    assert not engine.vector_memtable
    assert memtable_factory(store) == "SkipListFactory"
    engine.close()


def test_a_store_last_opened_with_a_vector_memtable_opens_again_with_its_normal_options(tmp_path: Path) -> None:
    """A crash during a load leaves files that record the vector memtable: whoever opens the store next must not
    inherit it (rocksdict would take an existing store's column family options from its files)."""
    store = tmp_path / "store"
    engine = RocksDbKeyValueStorageEngine(store)
    engine.reopen(vector_memtable=True)
    engine.put_columns([key(2), key(1)], [b"a", b"b"])
    engine.close()
    assert memtable_factory(store).startswith("{id=VectorRepFactory")
    again = RocksDbKeyValueStorageEngine(store)
    assert not again.vector_memtable
    assert memtable_factory(store) == "SkipListFactory"
    assert dict(again.all()) == {key(1): b"b", key(2): b"a"}
    again.close()

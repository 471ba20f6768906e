"""The write-back object cache in front of a task's store: it reads and iterates like the plain store over
any sequence of operations, and after every write-back the engine and the changelog's last value per key
both equal what the task sees; a hot key reaches the engine and the changelog once per write-back; a crash
restores, from the changelog, exactly the last checkpoint's state."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.checkpoint.checkpoint import CheckpointId
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig
from millstream.errors import ConfigError
from millstream.serde.builtin import JsonSerde, StringSerde
from millstream.storage.cached import CachedStore
from millstream.storage.errors import StateBackupError, StoreError
from millstream.storage.inmemory import InMemoryKeyValueStorageEngine
from millstream.storage.kv import KeyValueStorageEngine, TaskKeyValueStore
from tests.helpers import wait_until
from tests.storage.harness import TASK, Opened, StateHarness, state_config


class CountingEngine(InMemoryKeyValueStorageEngine):
    """Counts the engine reads and writes a store makes."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0
        self.puts = 0

    def get(self, key: bytes) -> bytes | None:
        self.gets += 1
        return super().get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.puts += 1
        super().put(key, value)


class Changelog:
    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    def __call__(self, key: bytes, value: bytes | None) -> None:
        self.records.append((key, value))

    def last_values(self) -> dict[bytes, bytes]:
        latest: dict[bytes, bytes | None] = {}
        for key, value in self.records:
            latest[key] = value
        return {key: value for key, value in latest.items() if value is not None}


def cached(engine: KeyValueStorageEngine, size: int = 100, batch: int | None = None) -> tuple[CachedStore, Changelog]:
    changelog = Changelog()
    store = TaskKeyValueStore("Partition 0", "counts", engine, StringSerde(), JsonSerde(), changelog)
    return CachedStore(store, size, batch or size), changelog


def test_a_hot_key_costs_one_engine_write_and_one_changelog_record_per_write_back() -> None:
    engine = CountingEngine()
    store, changelog = cached(engine)
    for count in range(1, 1001):
        store.put("hot", (store.get("hot") or 0) + 1)
        assert store.get("hot") == count
    assert engine.gets == 1 and engine.puts == 0 and changelog.records == []
    store.write_back()
    assert engine.puts == 1 and changelog.records == [(b"hot", b"1000")]
    store.write_back()
    assert engine.puts == 1 and len(changelog.records) == 1


def test_reads_see_own_writes_and_deletes_before_any_write_back(engine: KeyValueStorageEngine) -> None:
    store, changelog = cached(engine)
    store.put("a", {"n": 1})
    assert store.get("a") == {"n": 1} and store.get_all(["a", "b"]) == {"a": {"n": 1}}
    store.delete("a")
    assert store.get("a") is None and store.get_all(["a"]) == {}
    assert changelog.records == [] and engine.get(b"a") is None


def test_iterating_writes_back_first_so_range_all_and_snapshot_see_dirty_entries(engine: KeyValueStorageEngine) -> None:
    store, changelog = cached(engine)
    store.put_all({"a": 1, "b": 2, "c": 3})
    store.delete("b")
    assert list(store.range("a", "c")) == [("a", 1)]
    store.put("d", 4)
    assert list(store.all()) == [("a", 1), ("c", 3), ("d", 4)]
    store.delete_all(["a", "d"])
    with store.snapshot() as view:
        assert list(view) == [("c", 3)]
    assert changelog.last_values() == {b"c": b"3"}


def test_the_write_batch_size_bounds_the_dirty_entries() -> None:
    engine = CountingEngine()
    store, changelog = cached(engine, size=10, batch=3)
    store.put("a", 1)
    store.put("b", 1)
    store.put("a", 2)
    assert changelog.records == []
    store.put("c", 1)  # the third dirty key: the batch goes
    assert changelog.records == [(b"a", b"2"), (b"b", b"1"), (b"c", b"1")]


def test_evicting_a_dirty_entry_writes_it_back_and_the_least_recently_used_goes_first() -> None:
    engine = CountingEngine()
    store, changelog = cached(engine, size=2)
    store.put("a", 1)
    store.put("b", 1)
    assert store.get("a") == 1  # b is now the least recently used
    store.put("c", 1)
    assert changelog.last_values() == {b"a": b"1", b"b": b"1"}
    gets = engine.gets
    assert store.get("a") == 1 and engine.gets == gets  # still cached
    assert store.get("b") == 1 and engine.gets == gets + 1  # evicted, read back from the engine


def test_a_held_cache_keeps_every_write_past_its_batch_and_size_until_released() -> None:
    """While a commit's snapshot holds it, the engine and the changelog keep the state of the cut: the cut's
    entries go to the caller, later writes stay cached (no write-back, no eviction) and reads still see them."""
    engine = CountingEngine()
    store, changelog = cached(engine, size=2, batch=1)
    store.put("a", 1)  # batch 1: written back at once
    store.put("b", 1)
    assert changelog.last_values() == {b"a": b"1", b"b": b"1"}
    store._dirty[b"a"] = b"9"  # a dirty entry the cut takes (as a put below the batch size leaves one)
    store._cache[b"a"] = 9
    assert store.hold() == [(b"a", b"9")]
    for key in "cdef":
        store.put(key, 2)
    assert changelog.last_values() == {b"a": b"1", b"b": b"1"} and engine.get(b"c") is None
    assert [store.get(key) for key in "abcdef"] == [9, 1, 2, 2, 2, 2]
    store.release()
    store.put("g", 3)  # past the batch size: everything held goes now, then the cache shrinks to its size
    assert changelog.last_values() == {b"a": b"1", b"b": b"1", **{k.encode(): b"2" for k in "cdef"}, b"g": b"3"}
    assert len(store._cache) == 2


def test_iterating_a_held_cache_waits_for_the_release_and_sees_every_write() -> None:
    store, _ = cached(InMemoryKeyValueStorageEngine())
    store.put("a", 1)
    store.write_back()
    store.hold()
    store.put("b", 2)
    seen: list[Any] = []
    reader = threading.Thread(target=lambda: seen.extend(store.all()))
    reader.start()
    waiters = store._released._cond._waiters  # type: ignore[attr-defined] # CPython's Event: the threads waiting
    wait_until(lambda: len(waiters) == 1, 10, "the reader did not wait for the release")
    assert seen == []
    store.release()  # what the commit thread does once the snapshot is made
    reader.join(10)
    assert seen == [("a", 1), ("b", 2)]


def test_absent_keys_are_cached_too() -> None:
    engine = CountingEngine()
    store, _ = cached(engine)
    assert store.get("missing") is None and store.get("missing") is None
    assert engine.gets == 1


def test_the_objects_put_are_the_objects_handed_out() -> None:
    store, _ = cached(InMemoryKeyValueStorageEngine())
    value = {"n": [1, 2]}
    store.put("a", value)
    assert store.get("a") is value


def test_an_unserializable_value_fails_at_put_naming_task_and_store_and_leaves_nothing_dirty() -> None:
    store, _ = cached(InMemoryKeyValueStorageEngine())
    with pytest.raises(StoreError, match="task 'Partition 0' store 'counts': cannot serialize the value"):
        store.put("a", object())
    assert store.pending_writes == 0
    assert store.get("a") is None


def test_the_store_keeps_a_value_as_it_was_serialized_at_put() -> None:
    store, changelog = cached(InMemoryKeyValueStorageEngine())
    value = {"n": [1]}
    store.put("a", value)
    value["n"].append(2)  # changed in place, not put again
    store.write_back()
    assert changelog.records[-1][1] == b'{"n":[1]}'


def test_without_a_key_serde_bytes_keys_are_cached_as_they_are() -> None:
    changelog = Changelog()
    plain = TaskKeyValueStore("Partition 0", "counts", InMemoryKeyValueStorageEngine(), changelog=changelog)
    store = CachedStore(plain, 10, 10)
    store.put(b"k", b"1")
    store.put(bytearray(b"k"), b"2")  # the same key once serialized
    assert store.get(b"k") == b"2"
    store.write_back()
    assert changelog.records == [(b"k", b"2")]
    with pytest.raises(StoreError, match="keys cannot be None"):
        store.put(None, b"x")


keys = st.sampled_from(["a", "b", "c", "d", "e", "f"])
values = st.one_of(st.none(), st.integers(0, 9))
operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), keys, values),
        st.tuples(st.just("get"), keys),
        st.tuples(st.just("delete"), keys),
        st.tuples(st.just("put_all"), st.lists(st.tuples(keys, values), max_size=4)),
        st.tuples(st.just("delete_all"), st.lists(keys, max_size=3)),
        st.tuples(st.just("get_all"), st.lists(keys, max_size=4)),
        st.tuples(st.just("range"), keys, keys),
        st.tuples(st.just("all")),
        st.tuples(st.just("commit")),
    ),
    max_size=60,
)


def apply(store: Any, operation: tuple[Any, ...]) -> Any:
    name, *args = operation
    if name == "commit":
        store.write_back()
        return None
    result = getattr(store, name)(*args)
    return list(result) if name in ("range", "all") else result


@st.composite
def sizes(draw: st.DrawFn) -> tuple[int, int]:
    size = draw(st.integers(1, 5))
    return size, draw(st.integers(1, size))


@settings(max_examples=300, deadline=None)
@given(operations=operations, cache=sizes())
def test_the_cached_store_equals_the_plain_store_and_the_changelog_after_every_commit(
    operations: list[tuple[Any, ...]], cache: tuple[int, int]
) -> None:
    plain_engine, cached_engine = InMemoryKeyValueStorageEngine(), InMemoryKeyValueStorageEngine()
    plain = TaskKeyValueStore("Partition 0", "counts", plain_engine, StringSerde(), JsonSerde())
    store, changelog = cached(cached_engine, *cache)
    for operation in [*operations, ("commit",)]:
        assert apply(store, operation) == apply(plain, operation), operation
        if operation[0] == "commit":
            assert dict(cached_engine.all()) == dict(plain_engine.all())
            assert changelog.last_values() == dict(plain_engine.all())
        assert len(store._cache) <= cache[0] and len(store._dirty) <= cache[1]


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"object.cache.size": "-1"}, "stores.s.object.cache.size"),
        ({"object.cache.size": "10", "write.batch.size": "0"}, "stores.s.write.batch.size"),
        ({"object.cache.size": "10", "write.batch.size": "11"}, "stores.s.write.batch.size' is 11, more than"),
    ],
)
def test_cache_keys_are_validated_naming_the_key(keys: dict[str, str], message: str) -> None:
    config = Settings({f"stores.s.{key}": value for key, value in keys.items()})
    with pytest.raises(ConfigError, match=message):
        config.view(StoreConfig, "s").object_cache("s")


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({}, (10_000, 10_000)),
        ({"object.cache.size": "1000", "write.batch.size": "500"}, (1000, 500)),
        ({"object.cache.size": "0"}, (0, 0)),
        ({"object.cache.size": "0", "write.batch.size": "500"}, (0, 0)),
    ],
)
def test_the_write_batch_defaults_to_the_cache_size_and_0_disables_the_cache(
    keys: dict[str, str], expected: tuple[int, int]
) -> None:
    config = Settings({f"stores.s.{key}": value for key, value in keys.items()})
    assert config.view(StoreConfig, "s").object_cache("s") == expected


def crash(opened: Opened) -> None:
    """The process dies: what the cache wrote back on eviction reached the changelog (the producer flushed),
    what it still held dirty is lost."""
    opened.producers.flush(TASK)
    opened.storage.close()
    opened.container.close()


@pytest.mark.parametrize("seed", range(4))
def test_a_crash_restores_from_the_changelog_exactly_the_last_checkpoint_state_whatever_was_evicted(
    tmp_path: Path, seed: int
) -> None:
    """A cache smaller than the keys writes back on eviction between commits, so the changelog holds records
    newer than the checkpoint: the restore must revert them, and ending the run after the crash must give
    what a run without the crash gives."""
    rng = random.Random(seed)
    harness = StateHarness(state_config(tmp_path, "changelog", stores__counts__object__cache__size=3))
    batches = [[(f"k{rng.randrange(6)}", rng.choice([None, *range(5)])) for _ in range(30)] for _ in range(4)]
    reference: dict[str, int] = {}
    opened = harness.open()
    for number, batch in enumerate(batches):
        for key, value in batch:
            opened.store.put(key, value)
        if number < 2:
            harness.commit(opened)
            reference = dict(opened.store.all())
    crash(opened)

    restored = harness.open()
    assert dict(restored.store.all()) == reference
    for batch in batches[2:]:  # processed again after the crash
        for key, value in batch:
            restored.store.put(key, value)
    harness.commit(restored)
    fault_free: dict[str, int] = {}
    for batch in batches:
        for key, value in batch:
            if value is None:
                fault_free.pop(key, None)
            else:
                fault_free[key] = value
    assert dict(restored.store.all()) == fault_free
    restored.close()
    assert harness.open().store.get_all(list(fault_free)) == fault_free


def test_a_task_store_has_an_object_cache_by_default_and_none_with_size_0(tmp_path: Path) -> None:
    cached_store = StateHarness(state_config(tmp_path / "a", "changelog")).open()
    assert isinstance(cached_store.store, CachedStore) and cached_store.store.cache_size == 10_000
    cached_store.close()
    plain = StateHarness(state_config(tmp_path / "b", "changelog", stores__counts__object__cache__size=0)).open()
    assert isinstance(plain.store, TaskKeyValueStore)
    plain.close()


def test_a_snapshot_refuses_a_cache_not_written_back_before_the_producers_flush(tmp_path: Path) -> None:
    opened = StateHarness(state_config(tmp_path, "changelog")).open()
    opened.store.put("a", 1)
    with pytest.raises(StateBackupError, match="store 'counts' holds 1 writes not written back"):
        opened.storage.snapshot(CheckpointId.create())
    opened.storage.write_back()
    opened.producers.flush(TASK)
    opened.storage.snapshot(CheckpointId.create())
    opened.close()

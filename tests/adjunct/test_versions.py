"""Versioned adjunct stores: readers see sealed versions only, whole and one at a time; retired versions
are closed and deleted after their grace; a restart serves what ``CURRENT`` records and nothing else;
bulk-built versions are installed from table files."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from millstream.adjunct.sst import write_sst
from millstream.adjunct.versions import CURRENT_FILE, VERSIONS_DIR, VersionedStore
from millstream.model import SystemStreamPartition
from millstream.serde.builtin import JsonSerde, StringSerde
from millstream.storage.errors import StoreError
from millstream.storage.inmemory import InMemoryKeyValueStorageEngine
from millstream.storage.kv import KeyValueStorageEngine
from millstream.storage.rocksdb import RocksDbKeyValueStorageEngine
from tests.helpers import wait_until

SSP0 = SystemStreamPartition("kafka", "model.updates", 0)
SSP1 = SystemStreamPartition("kafka", "model.updates", 1)


def _open_engine(path: Path | None) -> KeyValueStorageEngine:
    return InMemoryKeyValueStorageEngine() if path is None else RocksDbKeyValueStorageEngine(path)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> _Clock:
    return _Clock()


Make = Callable[..., VersionedStore]


@pytest.fixture
def make(tmp_path: Path, clock: _Clock) -> Iterator[Make]:
    """Builds stores on ``tmp_path/store`` (or in memory with ``persistent=False``); closes them after."""
    made: list[VersionedStore] = []

    def make(persistent: bool = True, **options: Any) -> VersionedStore:
        options.setdefault("clock", clock)
        options.setdefault("source", "stream kafka.model.updates")
        store = VersionedStore(
            tmp_path / "store" if persistent else None,
            "models",
            "Partition 0",
            _open_engine,
            StringSerde(),
            JsonSerde(),
            **options,
        )
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture(params=["rocksdb", "inmemory"])
def persistent(request: pytest.FixtureRequest) -> bool:
    return bool(request.param == "rocksdb")


def _version_dirs(tmp_path: Path) -> list[str]:
    versions = tmp_path / "store" / VERSIONS_DIR
    return sorted(p.name for p in versions.iterdir()) if versions.is_dir() else []


def _sst(path: Path, entries: dict[str, Any]) -> Path:
    keys, values = StringSerde(), JsonSerde()
    write_sst(path, sorted((keys.to_bytes(k), values.to_bytes(v)) for k, v in entries.items()))
    return path


def test_readers_see_nothing_of_a_version_until_it_is_sealed(make: Make, persistent: bool) -> None:
    store = make(persistent)
    view = store.view()
    assert store.serving_label is None
    assert store.sealed_offsets == {}
    assert store.sealed_at_ms is None
    store.writer.put_all({"a": 1, "b": 2})
    assert view.get("a") is None
    assert list(view.all()) == []
    before = int(time.time() * 1000)
    store.seal("v1", {SSP0: "17"})
    assert view.get_all(["a", "b"]) == {"a": 1, "b": 2}
    assert store.serving_label == "v1"
    assert store.sealed_offsets == {SSP0: "17"}
    assert store.sealed_at_ms is not None and store.sealed_at_ms >= before


def test_the_sealed_version_serves_unchanged_while_the_next_is_built(make: Make, persistent: bool) -> None:
    store = make(persistent)
    view = store.view()
    store.writer.put_all({"a": 1, "b": 2, "c": 3})
    store.seal("v1", {SSP0: "3"})
    store.writer.put_all({"a": 10, "d": 40})
    store.writer.delete("d")
    assert list(view.all()) == [("a", 1), ("b", 2), ("c", 3)]
    store.seal("v2", {SSP0: "7"})
    assert list(view.all()) == [("a", 10)]
    assert store.serving_label == "v2"


def test_sealing_without_writes_serves_an_empty_version(make: Make, persistent: bool) -> None:
    store = make(persistent)
    store.writer.put("a", 1)
    store.seal("v1", {SSP0: "1"})
    store.seal("v2", {SSP0: "2"})
    assert list(store.view().all()) == []
    assert store.serving_label == "v2"


def test_discarded_building_version_leaves_nothing_behind(make: Make, persistent: bool, tmp_path: Path) -> None:
    store = make(persistent)
    store.writer.put("a", 1)
    store.discard_building()
    assert not store.building
    store.writer.put("b", 2)
    store.seal("v1", {SSP0: "1"})
    assert list(store.view().all()) == [("b", 2)]
    if persistent:
        assert len(_version_dirs(tmp_path)) == 1


@pytest.mark.parametrize("persistent", [True, False], ids=["rocksdb", "inmemory"])
def test_concurrent_readers_see_whole_sealed_versions_in_order(make: Make, persistent: bool) -> None:
    """Readers hammer ``get_all`` and ``get`` while the writer builds (slowly, key by key) and seals
    versions whose values all carry the version number, retiring old ones as it goes."""
    keys = [f"key-{i:02d}" for i in range(20)]
    versions = 15
    store = make(persistent, clock=time.monotonic, retire_after_s=0.5)
    view = store.view()
    sealing = [0]  # the highest version sealed or being sealed
    stop = threading.Event()
    failures: list[str] = []
    reads = [0]

    def read() -> None:
        last = 0
        while not stop.is_set():
            values = view.get_all(keys)
            seen = {value["version"] for value in values.values()}
            if values and (len(values) != len(keys) or len(seen) != 1):
                failures.append(f"a read mixed or missed keys: {sorted(seen)}, {len(values)} keys")
                return
            version = seen.pop() if seen else 0
            if version < last or version > sealing[0]:
                failures.append(f"read version {version} after {last}, with {sealing[0]} sealed at most")
                return
            last = version
            one = view.get(keys[version % len(keys)])
            if (0 if one is None else one["version"]) < last:
                failures.append(f"get went back from version {last}")
                return
            reads[0] += 1

    readers = [threading.Thread(target=read) for _ in range(4)]
    for reader in readers:
        reader.start()
    try:
        for version in range(1, versions + 1):
            for index, key in enumerate(keys):
                store.writer.put(key, {"version": version, "key": key})
                if index % 4 == 0:
                    time.sleep(0)  # let readers in while the version is half-built
            sealing[0] = version  # before the switch: a reader may see it as soon as seal assigns it
            store.seal(f"v{version}", {SSP0: str(version)})
            store.maintain()
            seen = reads[0]
            wait_until(lambda: reads[0] > seen or bool(failures), 10, f"a read after version {version}")  # noqa: B023
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert failures == []
    assert reads[0] > versions
    assert view.get_all(keys) == {key: {"version": versions, "key": key} for key in keys}


def test_a_retired_version_serves_reads_under_way_for_its_grace_then_is_closed_and_deleted(
    make: Make, persistent: bool, clock: _Clock, tmp_path: Path
) -> None:
    store = make(persistent, retire_after_s=5.0)
    store.writer.put("a", 1)
    store.seal("v1", {SSP0: "1"})
    under_way = store.serving_store()  # what a read that started before the switch holds
    store.writer.put("a", 2)
    store.seal("v2", {SSP0: "2"})
    clock.now += 4.9
    store.maintain()
    assert under_way.get("a") == 1
    if persistent:
        assert _version_dirs(tmp_path) == ["0", "1"]
    clock.now += 0.2
    store.maintain()
    with pytest.raises(StoreError, match=r"adjunct store 'models': version 'v1' was closed"):
        under_way.get("a")
    assert store.view().get("a") == 2
    if persistent:
        assert _version_dirs(tmp_path) == ["1"]


def test_a_restart_serves_the_sealed_version_and_its_offsets_and_discards_a_partial_one(
    make: Make, tmp_path: Path
) -> None:
    store = make()
    store.writer.put_all({"a": 1, "b": 2})
    store.seal("v1", {SSP0: "41", SSP1: "7"})
    sealed_at = store.sealed_at_ms
    store.writer.put_all({"a": 100, "z": 26})
    store.writer.flush()
    store.close()

    restarted = make()
    assert restarted.serving_label == "v1"
    assert restarted.sealed_offsets == {SSP0: "41", SSP1: "7"}
    assert restarted.sealed_at_ms == sealed_at
    assert list(restarted.view().all()) == [("a", 1), ("b", 2)]
    assert _version_dirs(tmp_path) == ["0"]
    restarted.writer.put("c", 3)
    restarted.seal("v2", {SSP0: "50", SSP1: "9"})
    assert list(restarted.view().all()) == [("c", 3)]
    assert _version_dirs(tmp_path) == ["0", "2"]


def test_a_restart_deletes_a_version_retired_before_the_crash(make: Make, tmp_path: Path) -> None:
    store = make()
    store.writer.put("a", 1)
    store.seal("v1", {SSP0: "1"})
    store.writer.put("a", 2)
    store.seal("v2", {SSP0: "2"})
    store.close()
    restarted = make()
    assert restarted.serving_label == "v2"
    assert restarted.view().get("a") == 2
    assert _version_dirs(tmp_path) == ["1"]


def _truncate(current: Path) -> None:
    current.write_bytes(current.read_bytes()[:20])


def _change_label(current: Path) -> None:
    current.write_bytes(current.read_bytes().replace(b'"v1"', b'"v9"'))


def _garbage(current: Path) -> None:
    current.write_bytes(b"\x00\xffnot json")


def _not_an_object(current: Path) -> None:
    current.write_bytes(b"[1, 2]")


def _delete_version_dir(current: Path) -> None:
    shutil.rmtree(current.parent / VERSIONS_DIR / "0")


@pytest.mark.parametrize("corrupt", [_truncate, _change_label, _garbage, _not_an_object, _delete_version_dir])
def test_a_corrupt_or_dangling_current_means_an_empty_store_and_no_version_dirs(
    make: Make, tmp_path: Path, corrupt: Callable[[Path], None]
) -> None:
    store = make()
    store.writer.put("a", 1)
    store.seal("v1", {SSP0: "1"})
    store.writer.put("b", 2)
    store.close()
    corrupt(tmp_path / "store" / CURRENT_FILE)

    restarted = make()
    assert restarted.serving_label is None
    assert restarted.sealed_offsets == {}
    assert list(restarted.view().all()) == []
    assert _version_dirs(tmp_path) == []
    restarted.writer.put("c", 3)
    restarted.seal("v2", {SSP0: "2"})
    assert list(restarted.view().all()) == [("c", 3)]


def test_install_serves_the_table_files_and_nothing_of_the_older_version(make: Make, tmp_path: Path) -> None:
    store = make()
    store.writer.put_all({"a": 1, "b": 2, "old-only": 0})
    store.seal("v1", {SSP0: "12"})
    files = [_sst(tmp_path / "build" / "0.sst", {"a": 10, "c": 30}), _sst(tmp_path / "build" / "1.sst", {"x": 99})]

    store.install("v2", files)
    assert list(store.view().all()) == [("a", 10), ("c", 30), ("x", 99)]
    assert store.view().get("old-only") is None
    assert store.serving_label == "v2"
    assert store.sealed_offsets == {SSP0: "12"}
    assert all(file.exists() for file in files)

    store.install("v3", [], {SSP0: "20"})
    assert list(store.view().all()) == []
    assert store.sealed_offsets == {SSP0: "20"}


def test_an_installed_version_survives_a_restart(make: Make, tmp_path: Path) -> None:
    store = make()
    store.install("bulk-1", [_sst(tmp_path / "build" / "0.sst", {"a": 1})], {SSP0: "5"})
    store.close()
    restarted = make()
    assert restarted.serving_label == "bulk-1"
    assert restarted.sealed_offsets == {SSP0: "5"}
    assert restarted.view().get("a") == 1


def test_install_leaves_a_version_being_built_in_progress(make: Make, tmp_path: Path) -> None:
    store = make()
    store.writer.put("built", 1)
    store.install("bulk", [_sst(tmp_path / "build" / "0.sst", {"bulk": 2})], {SSP0: "5"})
    assert list(store.view().all()) == [("bulk", 2)]
    store.writer.put("built-too", 3)
    store.seal("streamed", {SSP0: "9"})
    assert list(store.view().all()) == [("built", 1), ("built-too", 3)]


def test_a_failed_install_keeps_the_serving_version_and_leaves_no_directory(make: Make, tmp_path: Path) -> None:
    store = make()
    store.writer.put("a", 1)
    store.seal("v1", {SSP0: "1"})
    with pytest.raises(StoreError, match=r"missing\.sst"):
        store.install("v2", [tmp_path / "missing.sst"])
    assert store.serving_label == "v1"
    assert store.view().get("a") == 1
    assert _version_dirs(tmp_path) == ["0"]


def test_install_into_a_non_persistent_store_raises_naming_the_store(make: Make, tmp_path: Path) -> None:
    store = make(persistent=False)
    with pytest.raises(StoreError, match=r"adjunct store 'models'.*not persistent"):
        store.install("v1", [_sst(tmp_path / "0.sst", {"a": 1})])
    assert store.serving_label is None


def test_reads_after_close_raise_naming_the_store(make: Make, persistent: bool) -> None:
    store = make(persistent)
    store.writer.put("a", 1)
    store.seal("v1", {SSP0: "1"})
    view = store.view()
    store.close()
    with pytest.raises(StoreError, match="adjunct store 'models'"):
        view.get("a")
    with pytest.raises(StoreError, match="is closed"):
        store.seal("v2", {SSP0: "2"})

"""The SQLite metadata store: the MetadataStore contract, atomic compare-and-put across processes,
and a store object that survives pickling and fork."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sqlite3
import threading
from collections.abc import Iterator
from multiprocessing.synchronize import Event as ProcessEvent
from pathlib import Path

import pytest

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.metadata_factory import MetadataStoreFactory
from millstream.embedded.sqlite import SqliteMetadataStore
from millstream.errors import ConfigError


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteMetadataStore]:
    store = SqliteMetadataStore(tmp_path / "meta" / "metadata.db")
    store.init()
    yield store
    store.close()


def test_get_returns_none_for_a_missing_key(store: SqliteMetadataStore) -> None:
    assert store.get("ns", "absent") is None


def test_put_then_get_returns_the_bytes(store: SqliteMetadataStore) -> None:
    store.put("ns", "k", b"\x00value\xff")
    assert store.get("ns", "k") == b"\x00value\xff"


def test_put_overwrites_the_previous_value(store: SqliteMetadataStore) -> None:
    store.put("ns", "k", b"1")
    store.put("ns", "k", b"2")
    assert store.get("ns", "k") == b"2"


def test_namespaces_are_independent(store: SqliteMetadataStore) -> None:
    store.put("a", "k", b"in-a")
    store.put("b", "k", b"in-b")
    assert store.get("a", "k") == b"in-a"
    assert store.all("b") == {"k": b"in-b"}


def test_delete_removes_only_that_key(store: SqliteMetadataStore) -> None:
    store.put_all("ns", {"a": b"1", "b": b"2"})
    store.delete("ns", "a")
    store.delete("ns", "never-there")
    assert store.all("ns") == {"b": b"2"}


def test_put_all_and_delete_all_apply_every_item(store: SqliteMetadataStore) -> None:
    store.put_all("ns", {f"k{i}": str(i).encode() for i in range(10)})
    assert len(store.all("ns")) == 10
    store.delete_all("ns", [f"k{i}" for i in range(0, 10, 2)])
    assert sorted(store.all("ns")) == ["k1", "k3", "k5", "k7", "k9"]


def test_namespaced_view_reads_and_writes_its_namespace_only(store: SqliteMetadataStore) -> None:
    view = store.namespace("startpoints")
    view.put("k", b"v")
    store.put("other", "k", b"w")
    assert view.get("k") == b"v"
    assert view.all() == {"k": b"v"}


def test_compare_and_put_writes_when_every_expectation_holds(store: SqliteMetadataStore) -> None:
    store.put("gen", "g", b"3")
    store.put("epoch", "c0", b"7")
    assert store.compare_and_put("data", "k", b"new", {("gen", "g"): b"3", ("epoch", "c0"): b"7"})
    assert store.get("data", "k") == b"new"


def test_compare_and_put_refuses_when_any_expectation_fails(store: SqliteMetadataStore) -> None:
    store.put("gen", "g", b"3")
    store.put("epoch", "c0", b"8")
    store.put("data", "k", b"old")
    assert not store.compare_and_put("data", "k", b"new", {("gen", "g"): b"3", ("epoch", "c0"): b"7"})
    assert store.get("data", "k") == b"old"


def test_compare_and_put_with_none_expects_the_key_absent(store: SqliteMetadataStore) -> None:
    assert store.compare_and_put("ns", "k", b"first", {("ns", "k"): None})
    assert not store.compare_and_put("ns", "k", b"second", {("ns", "k"): None})
    assert store.get("ns", "k") == b"first"


def test_compare_and_put_with_no_expectations_always_writes(store: SqliteMetadataStore) -> None:
    assert store.compare_and_put("ns", "k", b"v", {})
    assert store.get("ns", "k") == b"v"


def test_a_refused_compare_and_put_leaves_the_store_usable(store: SqliteMetadataStore) -> None:
    assert not store.compare_and_put("ns", "k", b"v", {("ns", "other"): b"x"})
    store.put("ns", "k", b"after")
    assert store.get("ns", "k") == b"after"


def test_writes_are_visible_to_another_store_on_the_same_file(store: SqliteMetadataStore) -> None:
    store.put("ns", "k", b"v")
    other = SqliteMetadataStore(store.path)
    try:
        assert other.get("ns", "k") == b"v"
    finally:
        other.close()


def test_database_uses_wal_and_the_documented_table(store: SqliteMetadataStore) -> None:
    store.put("ns", "k", b"v")
    connection = sqlite3.connect(store.path)
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        columns = [row[1] for row in connection.execute("PRAGMA table_info(metadata)")]
        assert columns == ["namespace", "key", "value"]
    finally:
        connection.close()


def _table_sql(path: Path) -> str:
    connection = sqlite3.connect(path)
    try:
        return str(connection.execute("SELECT sql FROM sqlite_master WHERE name = 'metadata'").fetchone()[0])
    finally:
        connection.close()


def test_lookups_search_an_index_of_keys_not_the_rows_with_their_values(store: SqliteMetadataStore) -> None:
    """A WITHOUT ROWID table keeps whole rows in its search tree, so a key search compared keys against rows
    holding the job model (about 65 bytes per task) and read them whole: a checkpoint cost more the more tasks."""
    store.put("ns", "k", b"v")
    assert "WITHOUT ROWID" not in _table_sql(store.path).upper()
    connection = sqlite3.connect(store.path)
    try:
        plan = connection.execute(
            "EXPLAIN QUERY PLAN SELECT value FROM metadata WHERE namespace = ? AND key = ?", ("ns", "k")
        ).fetchall()
    finally:
        connection.close()
    assert any("USING INDEX sqlite_autoindex_metadata_1" in row[-1] for row in plan), plan


def _file_of_an_earlier_release(path: Path, rows: list[tuple[str, str, bytes]]) -> sqlite3.Connection:
    """A metadata file as releases before the rowid table made it, holding ``rows``; its connection stays open."""
    earlier = sqlite3.connect(path)
    earlier.executescript(
        "PRAGMA journal_mode = WAL; CREATE TABLE metadata (namespace TEXT NOT NULL, key TEXT NOT NULL, "
        "value BLOB NOT NULL, PRIMARY KEY (namespace, key)) WITHOUT ROWID;"
    )
    earlier.executemany("INSERT INTO metadata VALUES (?, ?, ?)", rows)
    earlier.commit()
    return earlier


def test_a_file_of_an_earlier_release_is_rewritten_as_a_rowid_table_keeping_every_row(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    earlier = _file_of_an_earlier_release(
        path, [("job-model", "latest", b"m" * 70_000), ("checkpoint-v2", "Partition 0", b"c")]
    )
    store = SqliteMetadataStore(path)
    try:
        assert store.get("job-model", "latest") == b"m" * 70_000
        assert "WITHOUT ROWID" not in _table_sql(path).upper()
        assert store.all("checkpoint-v2") == {"Partition 0": b"c"}
        # a process of the earlier release, its connection open across the rewrite, reads and writes on
        earlier.execute("INSERT OR REPLACE INTO metadata VALUES ('checkpoint-v2', 'Partition 0', x'02')")
        earlier.commit()
        assert store.get("checkpoint-v2", "Partition 0") == b"\x02"
        store.put("checkpoint-v2", "Partition 0", b"\x03")
        assert earlier.execute("SELECT value FROM metadata WHERE key = 'Partition 0'").fetchone()[0] == b"\x03"
    finally:
        store.close()
        earlier.close()


def _increment_after_opening(store: SqliteMetadataStore, start: ProcessEvent) -> None:
    start.wait(timeout=60)
    _cas_increment(store, "counter", "n")
    store.close()


def test_processes_opening_a_file_of_an_earlier_release_at_once_rewrite_it_once_and_lose_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "metadata.db"
    _file_of_an_earlier_release(path, [("counter", "n", b"0"), ("job-model", "1", b"m" * 70_000)]).close()
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    store = SqliteMetadataStore(path)
    processes = [context.Process(target=_increment_after_opening, args=(store, start)) for _ in range(4)]
    for process in processes:
        process.start()
    start.set()
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert (store.get("counter", "n"), store.get("job-model", "1")) == (b"4", b"m" * 70_000)
    assert "WITHOUT ROWID" not in _table_sql(path).upper()
    store.close()


def test_store_reopens_after_close(store: SqliteMetadataStore) -> None:
    store.put("ns", "k", b"v")
    store.close()
    assert store.get("ns", "k") == b"v"


def test_open_creates_parent_directories(tmp_path: Path) -> None:
    store = SqliteMetadataStore(tmp_path / "a" / "b" / "c" / "m.db")
    store.put("ns", "k", b"v")
    store.close()
    assert (tmp_path / "a" / "b" / "c" / "m.db").exists()


def test_pickled_store_carries_only_its_path_and_lock_settings(store: SqliteMetadataStore) -> None:
    store.put("ns", "k", b"v")
    store.set_writer("the driver")
    store.take_over()
    state = store.__getstate__()
    assert state == {"path": str(store.path), "settings": store.settings}
    copy = pickle.loads(pickle.dumps(store))
    try:
        assert copy.get("ns", "k") == b"v"
    finally:
        copy.close()


def test_threads_of_one_process_can_share_a_store(store: SqliteMetadataStore) -> None:
    def increment_many() -> None:
        for _ in range(50):
            _cas_increment(store, "counter", "n")

    threads = [threading.Thread(target=increment_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.get("counter", "n") == b"200"


def _cas_increment(store: MetadataStore, namespace: str, key: str) -> None:
    while True:
        raw = store.get(namespace, key)
        value = int(raw) if raw is not None else 0
        if store.compare_and_put(namespace, key, str(value + 1).encode(), {(namespace, key): raw}):
            return


def _increment_in_child(store: SqliteMetadataStore, count: int) -> None:
    for _ in range(count):
        _cas_increment(store, "counter", "n")
    store.close()


def test_concurrent_compare_and_put_from_spawned_processes_loses_no_increment(tmp_path: Path) -> None:
    # No init() in the parent: the children also race to create the file, its WAL and its table.
    store = SqliteMetadataStore(tmp_path / "metadata.db")
    context = multiprocessing.get_context("spawn")
    per_process = 100
    processes = [context.Process(target=_increment_in_child, args=(store, per_process)) for _ in range(4)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert store.get("counter", "n") == str(4 * per_process).encode()
    store.close()


def _write_from_child(store: SqliteMetadataStore) -> None:
    store.put("child", "pid", str(os.getpid()).encode())
    store.close()


def test_store_pickled_to_a_spawned_child_writes_to_the_same_file(store: SqliteMetadataStore) -> None:
    store.put("parent", "k", b"v")
    process = multiprocessing.get_context("spawn").Process(target=_write_from_child, args=(store,))
    process.start()
    process.join(timeout=60)
    assert process.exitcode == 0
    assert store.get("child", "pid") == str(process.pid).encode()


@pytest.mark.skipif(
    not hasattr(os, "fork"),
    reason="no os.fork on this platform (Windows): the case it protects, forked workers, cannot happen",
)
def test_forked_child_opens_its_own_connection(store: SqliteMetadataStore) -> None:
    store.put("parent", "k", b"before-fork")
    parent_connection = store._connection
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            if store.get("parent", "k") == b"before-fork" and store._connection is not parent_connection:
                store.put("child", "k", b"from-child")
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store._connection is parent_connection
    assert store.get("child", "k") == b"from-child"


def test_factory_defaults_to_sqlite_in_the_job_directory(tmp_path: Path) -> None:
    config = Settings({"job.name": "wordcount", "job.id": "2", "job.data.dir": str(tmp_path / "data")})
    store = metadata_store(config)
    assert isinstance(store, SqliteMetadataStore)
    assert store.path == tmp_path / "data" / "jobs" / "wordcount-2" / "metadata.db"
    assert store.path.parent.is_dir()


def test_factory_uses_the_configured_path(tmp_path: Path) -> None:
    path = tmp_path / "elsewhere" / "m.db"
    store = metadata_store(Settings({"metadata.store.factory": "sqlite", "metadata.store.path": str(path)}))
    assert isinstance(store, SqliteMetadataStore)
    assert store.path == path
    assert path.parent.is_dir()


class _MemoryStoreFactory(MetadataStoreFactory):
    def get_metadata_store(self, config: Settings) -> MetadataStore:
        return SqliteMetadataStore(Path(config["metadata.store.path"]))


def test_factory_loads_a_module_class_path(tmp_path: Path) -> None:
    config = Settings(
        {"metadata.store.factory": f"{__name__}:_MemoryStoreFactory", "metadata.store.path": str(tmp_path / "x.db")}
    )
    assert isinstance(metadata_store(config), SqliteMetadataStore)


def test_factory_rejects_a_class_that_is_not_a_metadata_store_factory() -> None:
    with pytest.raises(ConfigError, match=r"metadata\.store\.factory"):
        metadata_store(Settings({"metadata.store.factory": "millstream.config.core:Config"}))


def test_factory_rejects_an_unknown_name_listing_the_built_in_ones() -> None:
    with pytest.raises(ConfigError, match=r"metadata\.store\.factory.*sqlite"):
        metadata_store(Settings({"metadata.store.factory": "nosuch"}))


def test_factory_rejects_unknown_keys_in_the_metadata_namespace() -> None:
    with pytest.raises(ConfigError, match=r"metadata\.store\.bogus"):
        metadata_store(Settings({"metadata.store.bogus": "1"}))

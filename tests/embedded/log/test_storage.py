"""One partition file: dense offsets, atomic batched appends, retention, sealing and SQLite settings.

The file holds one row per appended batch; trims and reads may fall inside a batch. The property
tests at the end check reads, trims and timestamp lookups against a plain list of the appended records.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.embedded.log import storage
from millstream.embedded.log.errors import LogStorageError, PartitionSealedError
from millstream.embedded.log.storage import BUSY_TIMEOUT_MS, FORMAT_VERSION, LogPartition, PartitionState, Records

from .conftest import stored_batches


@pytest.fixture
def partition(tmp_path: Path) -> Iterator[LogPartition]:
    log = LogPartition(tmp_path / "p0.db", "events", 0, create=True)
    yield log
    log.close()


def records(*values: bytes, timestamp: int = 1_000) -> list[tuple[int, bytes | None, bytes | None, bytes | None]]:
    return [(timestamp, None, value, None) for value in values]


def values_of(read: Records | None) -> list[bytes]:
    return [] if read is None else read.values


def batches(log: LogPartition) -> list[tuple[int, int, int, int, int]]:
    """``(base_offset, end_offset, count, min_ts, max_ts)`` of every stored batch, in offset order."""
    return log._connection.execute(
        "SELECT base_offset, end_offset, count, min_ts, max_ts FROM batches ORDER BY end_offset"
    ).fetchall()


def test_a_new_partition_is_empty_and_unsealed(partition: LogPartition) -> None:
    assert partition.state() == PartitionState(oldest=0, upcoming=0, sealed=False)
    assert partition.read(0, 10) is None


def test_append_assigns_dense_offsets_from_zero_across_batches(partition: LogPartition) -> None:
    assert partition.append(records(b"a", b"b")) == 0
    assert partition.append(records(b"c")) == 2
    assert partition.append(records(b"d", b"e", b"f")) == 3
    assert partition.state().upcoming == 6
    assert values_of(partition.read(0, 100)) == [b"a", b"b", b"c", b"d", b"e", b"f"]


def test_append_of_nothing_changes_nothing(partition: LogPartition) -> None:
    partition.append(records(b"a"))
    assert partition.append([]) == 1
    assert partition.state().upcoming == 1


def test_read_returns_key_value_timestamp_and_headers(partition: LogPartition) -> None:
    partition.append([(42, b"k", b"value", {"h": b"\x01"}), (43, None, None, None)])
    read = partition.read(0, 10)
    assert read is not None
    assert read.rows() == [(b"k", b"value", 42, {"h": b"\x01"}), (None, None, 43, None)]


def test_read_starts_at_the_given_offset_and_stops_at_the_limit(partition: LogPartition) -> None:
    partition.append(records(*(bytes([i]) for i in range(10))))
    assert values_of(partition.read(3, 4)) == [bytes([3]), bytes([4]), bytes([5]), bytes([6])]
    assert partition.read(10, 4) is None


def test_trim_deletes_records_below_the_offset_and_moves_oldest(partition: LogPartition) -> None:
    partition.append(records(b"a", b"b", b"c", b"d"))
    assert partition.trim(2) == 2
    assert partition.state() == PartitionState(oldest=2, upcoming=4, sealed=False)
    assert values_of(partition.read(2, 10)) == [b"c", b"d"]


def test_read_below_oldest_returns_nothing_rather_than_later_records(partition: LogPartition) -> None:
    partition.append(records(b"a", b"b", b"c"))
    partition.trim(2)
    assert partition.read(0, 10) is None
    assert partition.read(1, 10) is None


def test_trim_never_moves_oldest_backwards(partition: LogPartition) -> None:
    partition.append(records(b"a", b"b", b"c"))
    partition.trim(2)
    assert partition.trim(1) == 2
    assert partition.state().oldest == 2


def test_trim_beyond_the_end_empties_the_partition_without_passing_upcoming(partition: LogPartition) -> None:
    partition.append(records(b"a", b"b"))
    assert partition.trim(100) == 2
    assert partition.state() == PartitionState(oldest=2, upcoming=2, sealed=False)


def test_a_large_trim_runs_in_chunks_and_ends_at_the_same_place(
    partition: LogPartition, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storage, "TRIM_CHUNK", 3)
    partition.append(records(*(bytes([i]) for i in range(10))))
    assert partition.trim(8) == 8
    assert partition.state().oldest == 8
    assert partition.trim(100) == 10


def test_an_append_to_a_file_deleted_since_it_was_opened_fails_instead_of_vanishing(
    partition: LogPartition,
) -> None:
    partition.append(records(b"a"))
    partition.path.unlink()
    with pytest.raises(LogStorageError, match=r"p0\.db.*deleted or replaced since it was opened"):
        partition.append(records(b"b"))


def test_offsets_are_not_reused_after_the_partition_is_trimmed_empty(partition: LogPartition) -> None:
    partition.append(records(b"a", b"b"))
    partition.trim(2)
    assert partition.append(records(b"c")) == 2
    assert values_of(partition.read(2, 10)) == [b"c"]


def test_append_to_a_sealed_partition_raises_and_appends_nothing(partition: LogPartition) -> None:
    partition.append(records(b"a"))
    partition.seal()
    with pytest.raises(PartitionSealedError, match=r"'events' partition 0 .*p0\.db.* sealed"):
        partition.append(records(b"b", b"c"))
    assert partition.state() == PartitionState(oldest=0, upcoming=1, sealed=True)


def test_an_append_to_a_file_without_its_meta_row_names_the_damage_rather_than_a_seal(tmp_path: Path) -> None:
    path = tmp_path / "p0.db"
    LogPartition(path, "events", 0, create=True).close()
    log = LogPartition(path, "events", 0)
    log._connection.execute("DELETE FROM meta")
    with pytest.raises(LogStorageError, match=r"'events' partition 0 .*p0\.db.*meta row is missing") as raised:
        log.append(records(b"a"))
    assert not isinstance(raised.value, PartitionSealedError)
    assert batches(log) == []
    log.close()


def test_appends_alternating_between_two_connections_get_dense_offsets_in_commit_order(
    partition: LogPartition,
) -> None:
    other = LogPartition(partition.path, "events", 0)
    assert partition.append(records(b"a")) == 0
    assert partition.append(records(b"b")) == 1
    assert other.append(records(b"c", b"d")) == 2
    assert partition.append(records(b"e")) == 4
    assert other.append(records(b"f")) == 5
    assert values_of(partition.read(0, 10)) == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert partition.state().upcoming == other.state().upcoming == 6
    other.close()


def test_a_seal_through_another_connection_refuses_the_next_append(partition: LogPartition) -> None:
    partition.append(records(b"a"))
    other = LogPartition(partition.path, "events", 0)
    other.seal()
    with pytest.raises(PartitionSealedError):
        partition.append(records(b"b"))
    assert partition.state() == PartitionState(oldest=0, upcoming=1, sealed=True)
    other.close()


def test_a_failed_batch_appends_nothing(partition: LogPartition) -> None:
    partition.append(records(b"a"))
    with pytest.raises(LogStorageError, match=r"cannot append 2 records"):
        partition.append([(1, None, b"ok", None), ("not-a-timestamp-row",)])  # type: ignore[list-item]
    assert partition.state().upcoming == 1
    assert partition.append(records(b"b")) == 1


def test_offset_for_timestamp_finds_the_first_offset_at_or_after_it_in_offset_order(
    partition: LogPartition,
) -> None:
    partition.append([(100, None, b"a", None), (300, None, b"b", None), (200, None, b"c", None)])
    assert partition.offset_for_timestamp(50) == 0
    assert partition.offset_for_timestamp(150) == 1
    assert partition.offset_for_timestamp(300) == 1


def test_offset_for_timestamp_is_upcoming_when_no_record_is_that_recent(partition: LogPartition) -> None:
    partition.append([(100, None, b"a", None)])
    assert partition.offset_for_timestamp(101) == 1


def test_offset_for_timestamp_ignores_trimmed_records(partition: LogPartition) -> None:
    partition.append([(500, None, b"a", None), (100, None, b"b", None), (600, None, b"c", None)])
    partition.trim(1)
    assert partition.offset_for_timestamp(400) == 2


def test_state_survives_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p3.db"
    log = LogPartition(path, "events", 3, create=True)
    log.append(records(b"a", b"b", b"c"))
    log.trim(1)
    log.seal()
    log.close()
    reopened = LogPartition(path, "events", 3)
    assert reopened.state() == PartitionState(oldest=1, upcoming=3, sealed=True)
    assert values_of(reopened.read(1, 10)) == [b"b", b"c"]
    reopened.close()


def test_the_file_is_in_wal_mode_with_a_30s_busy_timeout_and_normal_sync(partition: LogPartition) -> None:
    connection = partition._connection
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert connection.execute("PRAGMA busy_timeout").fetchone()[0] == BUSY_TIMEOUT_MS == 30_000
    assert connection.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


def test_fsync_makes_commits_synchronous_full(tmp_path: Path) -> None:
    log = LogPartition(tmp_path / "p0.db", "events", 0, fsync=True, create=True)
    assert log._connection.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    log.close()


@pytest.mark.parametrize("page_cache", [True, False])
def test_a_reopened_file_gets_every_setting_of_its_connection(tmp_path: Path, page_cache: bool) -> None:
    path = tmp_path / "p0.db"
    LogPartition(path, "events", 0, create=True).close()
    log = LogPartition(path, "events", 0, fsync=True, page_cache=page_cache)
    connection = log._connection
    assert connection.execute("PRAGMA busy_timeout").fetchone()[0] == BUSY_TIMEOUT_MS
    assert connection.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert connection.execute("PRAGMA mmap_size").fetchone()[0] == storage.MMAP_SIZE
    assert (connection.execute("PRAGMA cache_size").fetchone()[0] == 0) is not page_cache
    assert not connection.in_transaction
    log.close()


def test_one_append_is_one_batch_row_keyed_by_its_exclusive_end_offset(partition: LogPartition) -> None:
    partition.append([(300, None, b"a", None), (100, None, b"b", None), (200, None, b"c", None)])
    partition.append(records(b"d", timestamp=50))
    assert batches(partition) == [(0, 3, 3, 100, 300), (3, 4, 1, 50, 50)]
    assert partition._connection.execute("PRAGMA user_version").fetchone() == (FORMAT_VERSION,)


def test_a_batch_payload_is_msgpack_columns_leaving_out_keys_and_headers_when_all_none(
    partition: LogPartition,
) -> None:
    partition.append(records(b"a", b"b"))
    partition.append([(7, b"k", b"v", None), (8, None, None, {"h": b"\x01"})])
    payloads = [payload for _, _, _, payload in stored_batches(partition.path)]
    assert [msgpack.unpackb(payload) for payload in payloads] == [
        [[1_000, 1_000], None, [b"a", b"b"], None],
        [[7, 8], [b"k", None], [b"v", None], [None, {"h": b"\x01"}]],
    ]


def test_a_read_spanning_batches_joins_columns_that_some_batches_leave_out(partition: LogPartition) -> None:
    partition.append([(1, None, b"a", None)])
    partition.append([(2, b"k", b"b", {"h": b"x"})])
    partition.append([(3, None, b"c", None), (4, None, None, None)])
    read = partition.read(0, 10)
    assert read is not None
    assert read.rows() == [
        (None, b"a", 1, None),
        (b"k", b"b", 2, {"h": b"x"}),
        (None, b"c", 3, None),
        (None, None, 4, None),
    ]
    assert partition.read(2, 10) == Records(2, [3, 4], None, [b"c", None], None)


def test_a_trim_inside_a_batch_keeps_the_batch_and_hides_the_records_below_oldest(partition: LogPartition) -> None:
    partition.append(records(b"a", b"b"))
    partition.append(records(b"c", b"d", b"e"))
    assert partition.trim(3) == 3
    assert batches(partition) == [(2, 5, 3, 1_000, 1_000)]
    assert partition.read(2, 10) is None
    assert values_of(partition.read(3, 10)) == [b"d", b"e"]
    assert partition.trim(5) == 5
    assert batches(partition) == []


def test_a_read_that_reaches_into_a_batch_stops_at_the_limit(partition: LogPartition) -> None:
    for start in range(0, 12, 4):
        partition.append(records(*(bytes([i]) for i in range(start, start + 4))))
    assert values_of(partition.read(1, 6)) == [bytes([i]) for i in range(1, 7)]
    assert values_of(partition.read(5, 1)) == [bytes([5])]
    assert values_of(partition.read(6, 100)) == [bytes([i]) for i in range(6, 12)]


def test_an_append_too_big_for_one_batch_is_stored_as_several_committed_together(
    partition: LogPartition, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storage, "MAX_BATCH_BYTES", 100)
    values = [bytes([i]) * 30 for i in range(7)]
    assert partition.append([(i, None, value, None) for i, value in enumerate(values)]) == 0
    stored = batches(partition)
    assert len(stored) > 1
    assert [(base, end) for base, end, *_ in stored] == [(0, 1), (1, 3), (3, 5), (5, 7)]
    assert [(low, high) for *_, low, high in stored] == [(0, 0), (1, 2), (3, 4), (5, 6)]
    assert partition.state().upcoming == 7
    assert values_of(partition.read(2, 4)) == values[2:6]
    assert partition.append(records(b"next")) == 7


def test_a_read_of_no_records_is_none(partition: LogPartition) -> None:
    partition.append(records(b"a"))
    assert partition.read(0, 0) is None


def test_offset_for_timestamp_looks_inside_a_batch_a_trim_cut_through(partition: LogPartition) -> None:
    partition.append([(900, None, b"a", None), (100, None, b"b", None), (200, None, b"c", None)])
    partition.append([(300, None, b"d", None)])
    assert partition.offset_for_timestamp(250) == 0
    partition.trim(1)
    assert partition.offset_for_timestamp(250) == 3
    assert partition.offset_for_timestamp(150) == 2
    assert partition.offset_for_timestamp(100) == 1


def test_a_file_of_another_format_version_is_refused_naming_both_versions(tmp_path: Path) -> None:
    path = tmp_path / "p0.db"
    LogPartition(path, "events", 0, create=True).close()
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA user_version = 1")
    connection.close()
    with pytest.raises(LogStorageError, match=r"p0\.db.*not a usable log partition file: format version 1.*reads 4"):
        LogPartition(path, "events", 0)


def test_opening_a_missing_partition_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p7.db"
    with pytest.raises(LogStorageError, match=r"'events' partition 7 \(file '.*p7\.db'\)"):
        LogPartition(path, "events", 7)
    assert not path.exists()


def test_opening_a_file_that_is_not_a_log_partition_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p0.db"
    sqlite3.connect(path).execute("CREATE TABLE other (x)").connection.close()
    with pytest.raises(LogStorageError, match=r"p0\.db.*not a usable log partition file"):
        LogPartition(path, "events", 0)


def test_creating_over_an_existing_file_is_refused(partition: LogPartition) -> None:
    with pytest.raises(LogStorageError, match=r"already exists"):
        LogPartition(partition.path, "events", 0, create=True)


def test_a_new_partition_file_holds_nothing_of_its_stream_or_number_so_a_copy_is_what_sqlite_makes(
    tmp_path: Path,
) -> None:
    """Byte for byte but for the incarnation, the header's application id (bytes 68 to 71)."""
    first = LogPartition(tmp_path / "a.db", "events", 0, create=True)
    first.close()
    second = LogPartition(tmp_path / "b.db", "other-stream", 7, create=True, fsync=True)
    second.close()
    a, b = bytearray((tmp_path / "a.db").read_bytes()), bytearray((tmp_path / "b.db").read_bytes())
    assert a[68:72] != b[68:72]
    assert first.identity[2] == int.from_bytes(a[68:72], "big")
    assert second.identity[2] == int.from_bytes(b[68:72], "big")
    a[68:72] = b[68:72] = bytes(4)
    assert a == b


def test_a_file_re_created_at_the_inode_number_of_the_one_deleted_has_another_identity(tmp_path: Path) -> None:
    """Filesystems reuse a deleted file's inode number, so only the incarnation tells the two files apart."""
    path = tmp_path / "p0.db"
    storage.create_partition_files([tmp_path / "first.db", path], "events")
    old = LogPartition(path, "events", 0)
    old.close()
    path.unlink()
    storage.create_partition_files([tmp_path / "again.db", path], "events")
    new = LogPartition(path, "events", 0)
    new.close()
    assert old.identity[2] != new.identity[2]
    assert old.identity != new.identity


@pytest.mark.parametrize("fsync", [False, True])
def test_created_partition_files_are_independent_empty_partitions(tmp_path: Path, fsync: bool) -> None:
    paths = [tmp_path / f"p{partition}.db" for partition in range(4)]
    storage.create_partition_files(paths, "events", fsync=fsync)
    assert sorted(tmp_path.iterdir()) == paths
    logs = [LogPartition(path, "events", partition) for partition, path in enumerate(paths)]
    try:
        for partition, log in enumerate(logs):
            for _ in range(partition):
                log.append(records(f"p{partition}".encode()))
        for partition, log in enumerate(logs):
            assert log.state().upcoming == partition
            assert values_of(log.read(0, 10)) == [f"p{partition}".encode()] * partition
    finally:
        for log in logs:
            log.close()


def test_creating_partition_files_over_an_existing_one_is_refused_naming_it(tmp_path: Path) -> None:
    paths = [tmp_path / f"p{partition}.db" for partition in range(3)]
    paths[2].write_bytes(b"someone else's")
    with pytest.raises(LogStorageError, match=r"partition 2 .*p2\.db.*cannot create the partition file"):
        storage.create_partition_files(paths, "events")
    assert paths[2].read_bytes() == b"someone else's"


append_op = st.tuples(st.just("append"), st.lists(st.binary(max_size=8), min_size=1, max_size=6))
trim_op = st.tuples(st.just("trim"), st.integers(min_value=0, max_value=40))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(append_op, trim_op), max_size=15))
def test_offsets_stay_dense_monotonic_and_unique_under_any_appends_and_trims(
    operations: list[tuple[str, object]],
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        log = LogPartition(Path(directory) / "p0.db", "events", 0, create=True)
        appended: list[bytes] = []  # appended[offset] is the value written at that offset
        oldest = 0
        try:
            for kind, argument in operations:
                if kind == "append":
                    values = argument
                    assert isinstance(values, list)
                    assert log.append(records(*values)) == len(appended)
                    appended.extend(values)
                else:
                    assert isinstance(argument, int)
                    previous = oldest
                    oldest = log.trim(argument)
                    assert previous <= oldest <= len(appended)
                    assert oldest == min(max(argument, previous), len(appended))
                state = log.state()
                assert state == PartitionState(oldest, len(appended), False)
                assert state.oldest <= state.upcoming
            for start in range(oldest, len(appended) + 1):
                assert values_of(log.read(start, 1000)) == appended[start:]
            for start in range(oldest):
                assert log.read(start, 1000) is None
        finally:
            log.close()


record_strategy = st.tuples(
    st.integers(min_value=0, max_value=20),
    st.none() | st.binary(max_size=3),
    st.none() | st.binary(max_size=5),
    st.none() | st.dictionaries(st.text(max_size=2), st.binary(max_size=2), max_size=2),
)
batch_op = st.tuples(st.just("append"), st.lists(record_strategy, min_size=1, max_size=9))
cut_op = st.tuples(st.just("trim"), st.integers(min_value=0, max_value=60))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.one_of(batch_op, batch_op, cut_op), max_size=12),
    st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=4),
    st.lists(st.integers(min_value=-1, max_value=22), min_size=1, max_size=6),
)
def test_reads_trims_and_timestamp_lookups_inside_batches_of_mixed_sizes_match_the_appended_records(
    operations: list[tuple[str, object]], limits: list[int], lookups: list[int]
) -> None:
    """Any start, any limit, any trim point and any timestamp, wherever batch boundaries fall."""
    with tempfile.TemporaryDirectory() as directory:
        log = LogPartition(Path(directory) / "p0.db", "events", 0, create=True)
        appended: list[tuple[int, bytes | None, bytes | None, dict[str, bytes] | None]] = []
        oldest = 0
        try:
            for kind, argument in operations:
                if kind == "append":
                    assert isinstance(argument, list)
                    assert log.append(argument) == len(appended)
                    appended.extend(argument)
                else:
                    assert isinstance(argument, int)
                    oldest = log.trim(argument)
                    assert oldest == min(max(argument, oldest), len(appended))
                assert log.state() == PartitionState(oldest, len(appended), False)
            expected = [(key, value, timestamp, headers) for timestamp, key, value, headers in appended]
            stored = batches(log)
            assert all(end > oldest and end == base + count for base, end, count, _, _ in stored)
            ends = [end for _, end, _, _, _ in stored]
            assert [base for base, _, _, _, _ in stored][1:] == ends[:-1], "batches leave gaps or overlap"
            assert ends[-1:] == ([len(appended)] if len(appended) > oldest else [])
            for start in range(oldest, len(appended) + 1):
                for limit in limits:
                    read = log.read(start, limit)
                    want = expected[start : start + limit]
                    if not want:
                        assert read is None
                        continue
                    assert read is not None and read.start == start
                    assert read.rows() == want
                    assert read.keys is not None or all(row[0] is None for row in want)
                    assert read.headers is not None or all(row[3] is None for row in want)
            for start in range(oldest):
                assert log.read(start, limits[0]) is None
            for timestamp in lookups:
                matches = [o for o in range(oldest, len(appended)) if appended[o][0] >= timestamp]
                assert log.offset_for_timestamp(timestamp) == (matches[0] if matches else len(appended))
        finally:
            log.close()


def test_the_wal_of_a_busy_partition_stays_small_because_sqlite_checkpoints_it(partition: LogPartition) -> None:
    """Each append writes a few index pages to the WAL (the records go to segments), and SQLite copies the WAL
    into the file every 1,000 pages and then starts it over: 4,000 appends stay far below 8,000 pages."""
    for index in range(4_000):
        partition.append(records(b"%d" % index))
    wal = partition.path.with_name(partition.path.name + "-wal")
    assert wal.stat().st_size < 1_200 * storage.PAGE_SIZE
    assert values_of(partition.read(3_999, 1)) == [b"3999"]

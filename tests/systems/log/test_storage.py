"""One partition file: dense offsets, atomic batched appends, retention, sealing and SQLite settings."""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.systems.log import storage
from millstream.systems.log.errors import LogStorageError, PartitionSealedError
from millstream.systems.log.storage import BUSY_TIMEOUT_MS, LogPartition, PartitionState


@pytest.fixture
def partition(tmp_path: Path) -> Iterator[LogPartition]:
    log = LogPartition(tmp_path / "p0.db", "events", 0, create=True)
    yield log
    log.close()


def records(*values: bytes, timestamp: int = 1_000) -> list[tuple[int, bytes | None, bytes | None, bytes | None]]:
    return [(timestamp, None, value, None) for value in values]


def values_of(rows: list[tuple]) -> list[bytes]:
    return [row[1] for row in rows]


def test_a_new_partition_is_empty_and_unsealed(partition: LogPartition) -> None:
    assert partition.state() == PartitionState(oldest=0, upcoming=0, sealed=False)
    assert partition.read(0, 10) == []


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
    partition.append([(42, b"k", b"value", b"\x80"), (43, None, None, None)])
    assert partition.read(0, 10) == [(b"k", b"value", 42, b"\x80"), (None, None, 43, None)]


def test_read_starts_at_the_given_offset_and_stops_at_the_limit(partition: LogPartition) -> None:
    partition.append(records(*(bytes([i]) for i in range(10))))
    assert values_of(partition.read(3, 4)) == [bytes([3]), bytes([4]), bytes([5]), bytes([6])]
    assert partition.read(10, 4) == []


def test_trim_deletes_records_below_the_offset_and_moves_oldest(partition: LogPartition) -> None:
    partition.append(records(b"a", b"b", b"c", b"d"))
    assert partition.trim(2) == 2
    assert partition.state() == PartitionState(oldest=2, upcoming=4, sealed=False)
    assert values_of(partition.read(2, 10)) == [b"c", b"d"]


def test_read_below_oldest_returns_nothing_rather_than_later_records(partition: LogPartition) -> None:
    partition.append(records(b"a", b"b", b"c"))
    partition.trim(2)
    assert partition.read(0, 10) == []
    assert partition.read(1, 10) == []


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


def test_headers_column_is_null_when_a_record_has_none(partition: LogPartition) -> None:
    partition.append(records(b"a"))
    row = partition._connection.execute("SELECT headers FROM records").fetchone()
    assert row == (None,)


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
                assert log.read(start, 1000) == []
        finally:
            log.close()

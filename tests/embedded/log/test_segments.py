"""A partition's payloads in segment files: written once, rolled by size, deleted by retention, and never
read as anything but the payload their index row names."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millstream.embedded.log import segments as segments_module
from millstream.embedded.log import storage
from millstream.embedded.log.errors import LogStorageError
from millstream.embedded.log.segments import Segments
from millstream.embedded.log.storage import LogPartition

VALUE = b"v" * 100


@pytest.fixture
def partition(tmp_path: Path) -> Iterator[LogPartition]:
    log = LogPartition(tmp_path / "p0.db", "events", 0, create=True)
    yield log
    log.close()


@pytest.fixture
def small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    """Segments of 2,000 bytes: two appends of 10 records of 100 bytes do not fit in one."""
    monkeypatch.setattr(storage, "SEGMENT_BYTES", 2_000)


def append(log: LogPartition, count: int, value: bytes = VALUE) -> int:
    return log.append([(1_000, None, value, None)] * count)


def segment_names(log: LogPartition) -> list[str]:
    return sorted(path.name for path in log.path.parent.glob("p0-*.seg"))


def values(log: LogPartition, start: int = 0) -> list[bytes]:
    read = log.read(start, 1_000_000)
    return [] if read is None else read.values


def test_payloads_go_to_one_segment_named_by_its_first_offset(partition: LogPartition) -> None:
    append(partition, 10)
    append(partition, 5)
    assert segment_names(partition) == ["p0-00000000000000000000.seg"]
    assert values(partition) == [VALUE] * 15


@pytest.mark.usefixtures("small_segments")
def test_an_append_that_would_pass_segment_bytes_starts_a_segment_named_by_its_first_offset(
    partition: LogPartition,
) -> None:
    for _ in range(4):
        append(partition, 10)
    assert segment_names(partition) == [
        "p0-00000000000000000000.seg",
        "p0-00000000000000000010.seg",
        "p0-00000000000000000020.seg",
        "p0-00000000000000000030.seg",
    ]
    assert values(partition) == [VALUE] * 40
    assert values(partition, 25) == [VALUE] * 15


@pytest.mark.usefixtures("small_segments")
def test_another_connection_appends_to_the_segment_where_the_last_append_left_it(partition: LogPartition) -> None:
    other = LogPartition(partition.path, "events", 0)
    append(partition, 5, b"a" * 100)
    append(other, 5, b"b" * 100)  # the general path: reads the segment and its end from the meta row
    append(partition, 5, b"c" * 100)  # the general path again: another connection appended meanwhile
    append(partition, 5, b"d" * 100)  # the expected path, past SEGMENT_BYTES: a new segment
    other.close()
    assert values(partition) == [b"a" * 100] * 5 + [b"b" * 100] * 5 + [b"c" * 100] * 5 + [b"d" * 100] * 5
    assert segment_names(partition) == ["p0-00000000000000000000.seg", "p0-00000000000000000015.seg"]


@pytest.mark.usefixtures("small_segments")
def test_a_trim_deletes_the_segments_whose_batches_are_all_gone(partition: LogPartition) -> None:
    for _ in range(4):
        append(partition, 10)
    partition.trim(15)  # inside the second segment's batch: it stays, its first five records hidden
    assert segment_names(partition) == [
        "p0-00000000000000000010.seg",
        "p0-00000000000000000020.seg",
        "p0-00000000000000000030.seg",
    ]
    assert values(partition, 15) == [VALUE] * 25
    partition.trim(40)  # everything: the segment appended to stays for the next append
    assert segment_names(partition) == ["p0-00000000000000000030.seg"]
    append(partition, 10)
    assert segment_names(partition) == ["p0-00000000000000000030.seg", "p0-00000000000000000040.seg"]
    assert values(partition, 40) == [VALUE] * 10


@pytest.mark.usefixtures("small_segments")
def test_a_reader_that_moved_on_holds_no_earlier_segment_open_so_retention_frees_its_space(
    partition: LogPartition,
) -> None:
    for _ in range(4):
        append(partition, 10)
    reader = LogPartition(partition.path, "events", 0)
    for start in range(0, 40, 10):  # as a consumer polls: on from where the last read ended
        assert reader.read(start, 10) is not None
    assert list(reader._segments._reading) == [30]
    assert values(reader, 5)[:1] == [VALUE]  # going back opens the earlier segments again
    reader.close()


@pytest.mark.usefixtures("small_segments")
def test_a_read_whose_segment_a_trim_deleted_meanwhile_reads_as_trimmed(
    partition: LogPartition, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        append(partition, 10)
    reader = LogPartition(partition.path, "events", 0)
    real_read = Segments.read

    def trimmed_first(self: Segments, *args: Any) -> bytes:
        partition.trim(25)  # another process's retention, between the reader's query and its file access
        return real_read(self, *args)

    monkeypatch.setattr(Segments, "read", trimmed_first)
    assert reader.read(0, 10) is None
    assert reader.state().oldest == 25
    reader.close()


def test_bytes_past_the_committed_end_of_a_crashed_append_are_overwritten(partition: LogPartition) -> None:
    append(partition, 10)
    (segment,) = partition.path.parent.glob("p0-*.seg")
    with segment.open("ab") as file:  # what an append wrote before its process died, uncommitted
        file.write(b"\xff" * 5_000)
    later = LogPartition(partition.path, "events", 0)
    append(later, 10, b"w" * 100)
    later.close()
    assert values(partition) == [VALUE] * 10 + [b"w" * 100] * 10


def test_a_failed_segment_write_appends_nothing_and_names_the_file(
    partition: LogPartition, monkeypatch: pytest.MonkeyPatch
) -> None:
    append(partition, 10)

    def disk_full(self: Segments, *args: Any) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(Segments, "write", disk_full)
        with pytest.raises(LogStorageError, match=r"cannot write segment file '.*p0-0+\.seg': .*No space left"):
            append(partition, 10, b"x" * 100)
    assert partition.state().upcoming == 10
    append(partition, 10, b"y" * 100)
    assert values(partition) == [VALUE] * 10 + [b"y" * 100] * 10


def test_with_fsync_each_payload_is_synced_before_its_row_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = LogPartition(tmp_path / "p0.db", "events", 0, create=True, fsync=True)
    observer = LogPartition(log.path, "events", 0)  # sees only what is committed
    synced_at: list[int] = []
    real_sync = os.fdatasync

    def sync(descriptor: int) -> None:
        synced_at.append(observer.state().upcoming)
        real_sync(descriptor)

    monkeypatch.setattr(segments_module.os, "fdatasync", sync)
    append(log, 10)
    append(log, 10)
    assert synced_at == [0, 10], "each payload is synced once, before the append that wrote it commits"
    assert observer.state().upcoming == 20
    observer.close()
    log.close()

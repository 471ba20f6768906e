"""Bulk reads of a log partition between two offsets (the ``BulkReadingSystemConsumer`` capability): exact
bounds, tombstones, empty ranges, gaps and open transactions, and errors naming the partition."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.contracts.systems import BulkReadingSystemConsumer, RecordBatch
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.bulk_read import read_range
from millstream.embedded.log.consumer import LogSystemConsumer
from millstream.embedded.log.errors import LogOffsetOutOfRangeError, LogStorageError, LogSystemError
from millstream.embedded.log.producer import LogSystemProducer
from millstream.embedded.log.storage import LogPartition

from .conftest import create, envelope, ssp


@pytest.fixture
def partition(tmp_path: Path) -> Iterator[LogPartition]:
    log = LogPartition(tmp_path / "p0.db", "events", 0, create=True)
    yield log
    log.close()


def append(log: LogPartition, first: int, count: int, txn: int | None = None) -> None:
    """Records ``k<i>`` → ``v<i>`` for ``i`` in ``[first, first + count)``, as one stored batch."""
    keys = [b"k%d" % i for i in range(first, first + count)]
    values = [b"v%d" % i for i in range(first, first + count)]
    log.append_columns([1_000] * count, keys, values, None, txn=txn)


def pairs(batches: list[RecordBatch]) -> list[tuple[bytes | None, bytes | None]]:
    out: list[tuple[bytes | None, bytes | None]] = []
    for batch in batches:
        keys = batch.keys if batch.keys is not None else [None] * len(batch)
        out.extend(zip(keys, batch.values, strict=True))
    return out


def expected(first: int, last: int) -> list[tuple[bytes | None, bytes | None]]:
    return [(b"k%d" % i, b"v%d" % i) for i in range(first, last + 1)]


def test_a_range_is_read_from_start_through_end_inclusive_and_never_past_it(partition: LogPartition) -> None:
    for first in range(0, 30, 10):
        append(partition, first, 10)  # three stored batches: the range starts and ends inside them
    batches = list(read_range(partition, 3, 24, batch_size=4))
    assert pairs(batches) == expected(3, 24)
    assert [len(batch) for batch in batches] == [4, 4, 4, 4, 4, 2]
    assert [batch.next_offset for batch in batches] == ["7", "11", "15", "19", "23", "25"]
    assert [batch.size for batch in batches][:1] == [len(b"v3v4v5v6")]


def test_a_range_of_one_record_and_a_range_at_the_end_of_the_log(partition: LogPartition) -> None:
    append(partition, 0, 10)
    assert pairs(list(read_range(partition, 5, 5, batch_size=100))) == expected(5, 5)
    assert pairs(list(read_range(partition, 0, 9, batch_size=100))) == expected(0, 9)


def test_tombstones_come_as_none_values_and_do_not_count_as_bytes(partition: LogPartition) -> None:
    partition.append_columns([1, 1, 1], [b"a", b"b", b"a"], [b"xx", None, None], None)
    (batch,) = read_range(partition, 0, 2, batch_size=10)
    assert (list(batch.keys or ()), list(batch.values), batch.size) == ([b"a", b"b", b"a"], [b"xx", None, None], 2)


def test_records_without_keys_come_as_a_batch_without_a_key_column(partition: LogPartition) -> None:
    partition.append_columns([1, 1], None, [b"x", b"y"], None)
    (batch,) = read_range(partition, 0, 1, batch_size=10)
    assert batch.keys is None and list(batch.values) == [b"x", b"y"]


def test_an_empty_range_reads_nothing(partition: LogPartition) -> None:
    append(partition, 0, 5)
    assert list(read_range(partition, 3, 2, batch_size=10)) == []


def test_an_aborted_transactions_gap_is_stepped_over_inside_and_at_the_end_of_the_range(
    partition: LogPartition,
) -> None:
    append(partition, 0, 5)
    append(partition, 5, 5, txn=7)
    partition.resolve(7, commit=False)  # offsets 5..9 are a gap
    append(partition, 10, 5)
    assert pairs(list(read_range(partition, 2, 12, batch_size=100))) == [*expected(2, 4), *expected(10, 12)]
    ending_in_the_gap = list(read_range(partition, 3, 7, batch_size=100))
    assert pairs(ending_in_the_gap) == expected(3, 4)
    assert int(ending_in_the_gap[-1].next_offset) > 7  # the reader knows it is past the range


def test_the_read_stops_at_an_open_transaction_saying_where_a_reader_goes_on(partition: LogPartition) -> None:
    append(partition, 0, 5)
    append(partition, 5, 5, txn=3)  # open: a reader sees nothing from offset 5 on
    batches = list(read_range(partition, 1, 8, batch_size=100))
    assert pairs(batches) == expected(1, 4)
    assert batches[-1].next_offset == "5"


def test_a_start_below_the_oldest_offset_raises_naming_the_partition(partition: LogPartition) -> None:
    append(partition, 0, 10)
    partition.trim(4)
    with pytest.raises(LogOffsetOutOfRangeError, match=r"events.*trimmed"):
        list(read_range(partition, 2, 8, batch_size=100))


@pytest.fixture
def changelog(admin: LogSystemAdmin, producer: LogSystemProducer) -> None:
    create(admin, "changelog", partitions=2)
    for i in range(20):
        producer.send("t", envelope("changelog", b"v%d" % i, b"k%d" % i, partition=1))
    producer.flush("t")


def test_the_consumer_has_the_capability_and_reads_a_range_without_registering(
    changelog: None, consumer: LogSystemConsumer
) -> None:
    assert isinstance(consumer, BulkReadingSystemConsumer)
    assert pairs(list(consumer.read_range(ssp("changelog", 1), "4", "15"))) == expected(4, 15)
    assert list(consumer.read_range(ssp("changelog", 1), "15", "4")) == []
    assert list(consumer.read_range(ssp("changelog", 0), "0", "0")) == []  # an empty partition


def test_a_missing_partition_file_raises_an_error_naming_the_stream_and_partition(
    changelog: None, consumer: LogSystemConsumer, root: Path
) -> None:
    path = next(root.rglob("p1.db"))
    path.unlink()
    with pytest.raises(LogStorageError, match=r"changelog.*partition 1|partition 1.*changelog"):
        list(consumer.read_range(ssp("changelog", 1), "0", "5"))


def test_a_partition_the_stream_does_not_have_and_another_system_are_refused(
    changelog: None, consumer: LogSystemConsumer
) -> None:
    with pytest.raises(LogSystemError, match=r"partitions 0\.\.1"):
        list(consumer.read_range(ssp("changelog", 2), "0", "5"))
    with pytest.raises(LogSystemError, match="cannot read"):
        list(consumer.read_range(ssp("changelog", 0)._replace(system="other"), "0", "5"))

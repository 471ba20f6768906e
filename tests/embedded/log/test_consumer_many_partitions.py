"""The log's consumer over many partitions: every partition served in every poll, offsets exact, and quiet
partitions (nothing to read) woken by exactly the commits that concern them."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.contracts.systems import StreamSpec
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.consumer import QUIET_RECHECK_MS, LogSystemConsumer
from millstream.embedded.log.errors import LogStorageError
from millstream.embedded.log.layout import LogLayout
from millstream.embedded.log.producer import LogSystemProducer
from millstream.model import SystemStreamPartition

from .conftest import SYSTEM, create, read_all, ssp, write

PARTITIONS = 200


class FrozenClock:
    """The consumer's wall clock, moved by hand: a quiet partition is never due for its periodic inspection
    unless a test moves it, so what wakes it is the file's change alone."""

    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
def wide(admin: LogSystemAdmin) -> set[SystemStreamPartition]:
    create(admin, "wide", PARTITIONS)
    return {ssp("wide", partition) for partition in range(PARTITIONS)}


@pytest.fixture
def reader(root: Path, clock: FrozenClock, wide: set[SystemStreamPartition]) -> Iterator[LogSystemConsumer]:
    consumer = LogSystemConsumer(SYSTEM, LogLayout(root), batch_size=3, clock=clock)
    for each in wide:
        consumer.register(each, "0")
    consumer.start()
    yield consumer
    consumer.stop()


def test_one_poll_serves_every_partition_that_has_data_so_none_is_starved(
    producer: LogSystemProducer, reader: LogSystemConsumer, wide: set[SystemStreamPartition]
) -> None:
    for partition in range(PARTITIONS):
        write(producer, "wide", [f"{partition}-{n}".encode() for n in range(5)], partition=partition)
    first = reader.poll(wide, 0)
    assert first.keys() == wide
    assert {ssp: [e.offset for e in batch] for ssp, batch in first.items()} == {ssp: ["0", "1", "2"] for ssp in wide}
    second = reader.poll(wide, 0)
    assert {ssp: [e.offset for e in batch] for ssp, batch in second.items()} == {ssp: ["3", "4"] for ssp in wide}


def test_records_appended_to_quiet_partitions_are_read_once_each_in_offset_order(
    producer: LogSystemProducer, reader: LogSystemConsumer, wide: set[SystemStreamPartition]
) -> None:
    """Rounds of appends to a random few of many quiet partitions, a poll or two between them: each record
    comes exactly once, at its offset, though the clock never makes a quiet partition due for inspection."""
    assert read_all(reader, wide) == []  # every partition is quiet now
    rng = random.Random(36)
    sent: dict[int, list[bytes]] = {partition: [] for partition in range(PARTITIONS)}
    received: dict[int, list[tuple[str, bytes]]] = {partition: [] for partition in range(PARTITIONS)}
    for round_ in range(30):
        for partition in rng.sample(range(PARTITIONS), 7):
            values = [f"{partition}-{round_}-{n}".encode() for n in range(rng.randint(1, 5))]
            write(producer, "wide", values, partition=partition)
            sent[partition].extend(values)
        for _ in range(rng.randint(1, 2)):
            for each, batch in reader.poll(wide, 0).items():
                received[each.partition].extend((e.offset, e.message) for e in batch)
    for envelope in read_all(reader, wide):
        received[envelope.ssp.partition].append((envelope.offset, envelope.message))
    assert received == {p: [(str(n), value) for n, value in enumerate(values)] for p, values in sent.items()}


def test_a_quiet_partition_sees_its_seal_as_end_of_stream_at_the_next_poll(
    admin: LogSystemAdmin, reader: LogSystemConsumer, wide: set[SystemStreamPartition]
) -> None:
    assert read_all(reader, wide) == []
    admin.seal_stream("wide")
    ended = reader.poll(wide, 0)
    assert ended.keys() == wide
    assert all(len(batch) == 1 and batch[0].is_end_of_stream for batch in ended.values())
    assert reader.poll(wide, 0) == {}


def test_a_quiet_partition_is_inspected_again_once_its_recheck_is_due(
    admin: LogSystemAdmin, reader: LogSystemConsumer, clock: FrozenClock, wide: set[SystemStreamPartition]
) -> None:
    """What commits nothing to the file read (the stream re-created under it) is seen by the periodic
    inspection: before it is due the poll finds nothing, after it the reader fails rather than wait forever."""
    assert read_all(reader, wide) == []
    admin.clear_stream(StreamSpec(SYSTEM, "wide"))
    create(admin, "wide", PARTITIONS)
    assert reader.poll(wide, 0) == {}
    clock.ms += QUIET_RECHECK_MS
    with pytest.raises(LogStorageError, match="deleted or replaced"):
        reader.poll(wide, 0)

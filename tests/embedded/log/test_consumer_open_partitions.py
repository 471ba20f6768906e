"""The consumer's bounded pool of open partitions (``systems.<s>.consumer.open.partitions.max``): many partitions
through a tiny pool are each read exactly once and in order, none starved; closed quiet partitions are watched
through their files' signatures, which see every append, a seal and a replaced file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.config.settings import Settings
from millstream.embedded.log import consumer as consumer_module
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.consumer import LogSystemConsumer
from millstream.embedded.log.errors import LogStorageError
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.log.layout import LogLayout
from millstream.embedded.log.open_files import pool_bounds
from millstream.embedded.log.storage import LogPartition
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition
from tests.embedded.log.conftest import SYSTEM, Opened, create, log_config, recreate, ssp
from tests.helpers import wait_until

PARTITIONS = 200
POOL = 8


class Clock:
    """The consumer's injected clock: stands still unless a test moves it (no backstop falls due by itself)."""

    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def small_pool(root: Path, clock: Clock) -> Iterator[LogSystemConsumer]:
    consumer = LogSystemConsumer(SYSTEM, LogLayout(root, SYSTEM), batch_size=7, open_max=POOL, clock=clock)
    yield consumer
    consumer.stop()


def append(root: Path, stream: str, partition: int, values: list[bytes]) -> None:
    """Append through a file of its own, as another process would."""
    log = LogPartition(LogLayout(root, SYSTEM).partition_path(stream, partition), stream, partition)
    try:
        log.append_columns([0] * len(values), None, values, None)
    finally:
        log.close()


def values(batches: dict[SystemStreamPartition, list[IncomingMessageEnvelope]]) -> dict[int, list[bytes]]:
    return {
        each.partition: [envelope.message for envelope in batch if not envelope.is_end_of_stream]
        for each, batch in batches.items()
    }


def register_all(consumer: LogSystemConsumer, stream: str, count: int) -> set[SystemStreamPartition]:
    ssps = {ssp(stream, partition) for partition in range(count)}
    for each in sorted(ssps, key=lambda s: s.partition):
        consumer.register(each, "0")
    consumer.start()
    return ssps


def all_watched(consumer: LogSystemConsumer, ssps: set[SystemStreamPartition]) -> bool:
    """A poll found nothing and every partition the pool closed keeps a trusted signature."""
    if consumer.poll(ssps, 0):
        return False
    cursors = [consumer._cursors[each] for each in ssps]
    return all(cursor.partition is not None or cursor.signature is not None for cursor in cursors)


def test_200_partitions_through_a_pool_of_8_are_each_read_exactly_once_in_order_and_none_is_starved(
    admin: LogSystemAdmin, root: Path, small_pool: LogSystemConsumer
) -> None:
    """Every poll reads every partition with data (a batch of 7 from each), whichever are open, so no partition
    waits for others to run dry; the pool never holds more than 8 files between polls."""
    create(admin, "wide", PARTITIONS)
    for partition in range(PARTITIONS):
        append(root, "wide", partition, [b"%d-%d" % (partition, n) for n in range(20)])
    ssps = register_all(small_pool, "wide", PARTITIONS)
    assert small_pool.open_partitions <= POOL
    read: dict[int, list[bytes]] = {partition: [] for partition in range(PARTITIONS)}
    polls = 0
    while batches := small_pool.poll(ssps, 0):
        polls += 1
        if polls == 1:
            assert len(batches) == PARTITIONS, "a poll skipped partitions that have data"
        for partition, got in values(batches).items():
            read[partition] += got
        assert small_pool.open_partitions <= POOL
    assert polls == 3  # 20 records in batches of 7: every partition advanced at every poll
    assert read == {partition: [b"%d-%d" % (partition, n) for n in range(20)] for partition in range(PARTITIONS)}
    assert {each: small_pool.position(each) for each in ssps} == {each: "20" for each in ssps}


def watched_idle(admin: LogSystemAdmin, consumer: LogSystemConsumer, partitions: int) -> set[SystemStreamPartition]:
    """An ``idle`` stream of ``partitions`` registered with ``consumer``, once every closed partition is watched."""
    create(admin, "idle", partitions)
    ssps = register_all(consumer, "idle", partitions)
    wait_until(lambda: all_watched(consumer, ssps), 10, "every closed partition watched by its signature")
    return ssps


def test_a_closed_quiet_partition_is_watched_by_stat_and_sees_every_later_append_without_being_reopened(
    admin: LogSystemAdmin, root: Path, small_pool: LogSystemConsumer, opens: Opened
) -> None:
    ssps = watched_idle(admin, small_pool, 50)
    opens.order.clear()
    for _ in range(5):
        assert small_pool.poll(ssps, 0) == {}
    assert opens.order == [], "quiet closed partitions were reopened"

    for round_ in range(3):  # appends right after a poll, in the same clock tick as its signatures are compared
        for partition in (3, 17, 41):
            append(root, "idle", partition, [b"r%d" % round_])
        got = values(small_pool.poll(ssps, 0))
        assert got == {3: [b"r%d" % round_], 17: [b"r%d" % round_], 41: [b"r%d" % round_]}
        assert small_pool.open_partitions <= POOL


def test_closed_quiet_partitions_are_read_in_full_once_their_backstop_is_due(
    admin: LogSystemAdmin, small_pool: LogSystemConsumer, clock: Clock, opens: Opened
) -> None:
    ssps = watched_idle(admin, small_pool, 20)
    closed = {each.partition for each in ssps if small_pool._cursors[each].partition is None}
    assert len(closed) == 20 - POOL
    opens.order.clear()
    clock.now += consumer_module.CLOSED_RECHECK_MS - 1
    assert small_pool.poll(ssps, 0) == {}
    assert opens.order == []
    clock.now += 1
    assert small_pool.poll(ssps, 0) == {}
    reopened = [partition for _, partition in opens.order]
    assert closed <= set(reopened), "a closed partition went past its backstop unread"
    assert len(reopened) == len(set(reopened)) and small_pool.open_partitions <= POOL


def test_sealed_partitions_behind_a_small_pool_each_end_their_stream_once(
    admin: LogSystemAdmin, root: Path, small_pool: LogSystemConsumer
) -> None:
    create(admin, "sealed", 40)
    for partition in range(0, 40, 2):
        append(root, "sealed", partition, [b"x"])
    ssps = register_all(small_pool, "sealed", 40)
    assert len(small_pool.poll(ssps, 0)) == 20
    wait_until(lambda: all_watched(small_pool, ssps), 10, "every closed partition watched by its signature")
    admin.seal_stream("sealed")
    ended: list[int] = []
    while batches := small_pool.poll(ssps, 0):
        for each, batch in batches.items():
            assert [envelope.is_end_of_stream for envelope in batch] == [True]
            ended.append(each.partition)
    assert sorted(ended) == list(range(40))
    assert small_pool.open_partitions == 0, "ended partitions keep no file open"


def test_a_partition_file_replaced_while_the_pool_had_it_closed_fails_the_poll_naming_it(
    admin: LogSystemAdmin, root: Path, small_pool: LogSystemConsumer
) -> None:
    create(admin, "gone", 20)
    ssps = register_all(small_pool, "gone", 20)
    wait_until(lambda: all_watched(small_pool, ssps), 10, "every closed partition watched by its signature")
    closed = next(each for each in ssps if small_pool._cursors[each].partition is None)
    recreate(admin, root, "gone", 20)
    with pytest.raises(LogStorageError, match=rf"partition {closed.partition}\b.*deleted or replaced"):
        small_pool.poll({closed}, 0)


def test_the_pool_size_comes_from_its_config_key(root: Path) -> None:
    consumer = LogSystemFactory().get_consumer(SYSTEM, log_config(root, consumer__open__partitions__max=3))
    assert consumer.open_max == 3
    unset = pool_bounds(None, None, None).consumer  # a share of the hard open-file limit
    assert LogSystemFactory().get_consumer(SYSTEM, Settings({})).open_max == unset


def test_partitions_paused_behind_a_small_pool_resume_where_they_stopped(
    admin: LogSystemAdmin, root: Path, small_pool: LogSystemConsumer
) -> None:
    """Polling a subset (the others paused) closes the paused partitions' files as the pool turns over; resumed,
    they read on from their positions, nothing skipped or read twice."""
    create(admin, "paused", 30)
    for partition in range(30):
        append(root, "paused", partition, [b"%d-%d" % (partition, n) for n in range(10)])
    ssps = register_all(small_pool, "paused", 30)
    read: dict[int, list[bytes]] = {partition: [] for partition in range(30)}
    for partition, got in values(small_pool.poll(ssps, 0)).items():
        read[partition] += got  # the first 7 of each
    running = {each for each in ssps if each.partition % 3 == 0}
    while batches := small_pool.poll(running, 0):
        for partition, got in values(batches).items():
            read[partition] += got
    assert all(len(read[partition]) == (10 if partition % 3 == 0 else 7) for partition in range(30))
    while batches := small_pool.poll(ssps, 0):
        for partition, got in values(batches).items():
            read[partition] += got
    assert read == {partition: [b"%d-%d" % (partition, n) for n in range(10)] for partition in range(30)}

"""The producer's bounded pool of open partition files (``systems.<s>.producer.open.partitions.max``): writes to
many partitions through a tiny pool are exact and in order, under at-least-once and exactly-once, and a file
replaced while the pool had it closed fails the append instead of writing to the new stream."""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path

import pytest

from millstream.config.settings import Settings
from millstream.contracts.systems import WriterToken
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.errors import LogStorageError
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.log.layout import LogLayout
from millstream.embedded.log.open_files import pool_bounds
from millstream.embedded.log.producer import LogSystemProducer
from millstream.embedded.log.storage import LogPartition
from tests.embedded.log.conftest import SYSTEM, create, envelope, log_config, recreate

PARTITIONS = 200
POOL = 8


def stored(root: Path, stream: str, partition: int) -> list[bytes]:
    log = LogPartition(LogLayout(root, SYSTEM).partition_path(stream, partition), stream, partition)
    try:
        records = log.read(0, 1_000_000)
        return [] if records is None else list(records.values)
    finally:
        log.close()


def test_200_partitions_written_through_a_pool_of_8_hold_every_record_once_in_send_order(
    admin: LogSystemAdmin, root: Path
) -> None:
    """Small batches make every partition's buffer append several times, each append reopening a file the pool
    closed in between; the pool never holds more than 8."""
    create(admin, "wide", PARTITIONS)
    producer = LogSystemProducer(SYSTEM, LogLayout(root, SYSTEM), batch_size=3, open_max=POOL)
    producer.start()
    try:
        for n in range(10):
            for partition in range(PARTITIONS):
                producer.send("task", envelope("wide", b"%d-%d" % (partition, n), partition=partition))
                assert producer.open_partitions <= POOL
        producer.flush("task")
        assert producer.open_partitions <= POOL
    finally:
        producer.stop()
    for partition in range(PARTITIONS):
        assert stored(root, "wide", partition) == [b"%d-%d" % (partition, n) for n in range(10)], partition


def test_an_exactly_once_transaction_over_more_partitions_than_the_pool_commits_all_of_them(
    admin: LogSystemAdmin, root: Path
) -> None:
    """The transaction's batches wait in the files the pool closed; nothing is visible before the commit, which
    reopens each partition to publish it, and everything is after."""
    create(admin, "eos", 40)
    producer = LogSystemProducer(
        SYSTEM, LogLayout(root, SYSTEM), batch_size=2, transactional=True, transaction_timeout_ms=60_000, open_max=4
    )
    producer.set_writer(WriterToken("job-1", "0", 1, 1))
    producer.start()
    try:
        for n in range(5):
            for partition in range(40):
                producer.send("task", envelope("eos", b"%d-%d" % (partition, n), partition=partition))
        assert producer.open_partitions <= 4
        assert all(stored(root, "eos", partition) == [] for partition in range(40)), "visible before the commit"
        producer.commit_transaction()
        assert producer.open_partitions <= 4
    finally:
        producer.stop()
    for partition in range(40):
        assert stored(root, "eos", partition) == [b"%d-%d" % (partition, n) for n in range(5)], partition


def test_a_file_replaced_while_the_pool_had_it_closed_fails_the_append_naming_it(
    admin: LogSystemAdmin, root: Path
) -> None:
    create(admin, "gone", 4)
    producer = LogSystemProducer(SYSTEM, LogLayout(root, SYSTEM), batch_size=1, open_max=1)
    producer.start()
    try:
        producer.send("task", envelope("gone", b"a", partition=0))
        producer.send("task", envelope("gone", b"b", partition=1))  # the pool closes partition 0
        recreate(admin, root, "gone", 4)
        producer.send("task", envelope("gone", b"c", partition=0))
        with pytest.raises(LogStorageError, match=r"partition 0\b.*deleted or replaced"):
            producer.flush("task")
    finally:
        with suppress(LogStorageError):  # its final flush fails the same way; the files are closed regardless
            producer.stop()
    assert stored(root, "gone", 0) == []


def test_the_pool_size_comes_from_its_config_key(root: Path) -> None:
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root, producer__open__partitions__max=5))
    assert producer.open_max == 5
    unset = pool_bounds(None, None, None).producer  # a share of the hard open-file limit
    assert LogSystemFactory().get_producer(SYSTEM, Settings({})).open_max == unset

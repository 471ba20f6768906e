"""The log producer's ``describe``: the offsets of the partitions it holds open, read through its own connection,
as the admin answers them; whatever it cannot vouch for is left to the admin."""

from __future__ import annotations

from pathlib import Path

from millstream.contracts.systems import WriterToken
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.layout import LogLayout
from millstream.embedded.log.producer import LogSystemProducer
from millstream.model import SystemStreamPartition

from .conftest import SYSTEM, create, envelope, recreate, ssp

WRITER = WriterToken("job-1", "0", 1, 1)


def claimed(
    root: Path, stream: str, partitions: range, *, open_max: int | None = None, transactional: bool = False
) -> LogSystemProducer:
    """A started producer of writer ``WRITER`` that claimed ``partitions`` of ``stream``, each record its own batch."""
    producer = LogSystemProducer(
        SYSTEM,
        LogLayout(root, SYSTEM),
        batch_size=1,
        open_max=open_max,
        transactional=transactional,
        transaction_timeout_ms=60_000,
    )
    producer.set_writer(WRITER)
    producer.start()
    for partition in partitions:
        producer.claim(ssp(stream, partition))
    return producer


def test_a_claimed_partition_is_described_as_the_admin_describes_it(admin: LogSystemAdmin, root: Path) -> None:
    create(admin, "changelog", 3)
    producer = claimed(root, "changelog", range(3))
    try:
        for value in (b"a", b"b", b"c"):
            producer.send("task", envelope("changelog", value, partition=1))
        producer.flush("task")
        admin.trim(ssp("changelog", 1), "1")
        asked = [ssp("changelog", partition) for partition in range(3)]
        described = producer.describe(asked)
        assert described == admin.get_ssp_metadata(asked)
        assert (described[ssp("changelog", 1)].oldest_offset, described[ssp("changelog", 1)].newest_offset) == (
            "1",
            "2",
        )
        assert described[ssp("changelog", 0)].newest_offset is None
    finally:
        producer.stop()


def test_partitions_it_does_not_hold_or_of_another_system_are_left_to_the_admin(
    admin: LogSystemAdmin, root: Path
) -> None:
    create(admin, "changelog", 4)
    producer = claimed(root, "changelog", range(2), open_max=1)
    try:
        asked = [ssp("changelog", partition) for partition in range(4)] + [
            SystemStreamPartition("kafka", "changelog", 1)
        ]
        assert set(producer.describe(asked)) == {ssp("changelog", 1)}, "the pool of one kept the last claim only"
    finally:
        producer.stop()


def test_a_partition_whose_file_was_replaced_is_left_to_the_admin(admin: LogSystemAdmin, root: Path) -> None:
    create(admin, "changelog", 1)
    producer = claimed(root, "changelog", range(1))
    try:
        recreate(admin, root, "changelog")
        assert producer.describe([ssp("changelog", 0)]) == {}
    finally:
        producer.stop()


def test_a_partition_with_a_transaction_still_open_is_left_to_the_admin(admin: LogSystemAdmin, root: Path) -> None:
    create(admin, "changelog", 2)
    producer = claimed(root, "changelog", range(2), transactional=True)
    try:
        producer.send("task", envelope("changelog", b"pending", partition=1))
        producer.flush("task")
        described = producer.describe([ssp("changelog", 0), ssp("changelog", 1)])
        assert set(described) == {ssp("changelog", 0)}
        producer.commit_transaction()
        assert producer.describe([ssp("changelog", 1)]) == admin.get_ssp_metadata([ssp("changelog", 1)])
        assert producer.describe([ssp("changelog", 1)])[ssp("changelog", 1)].newest_offset == "0"
    finally:
        producer.stop()

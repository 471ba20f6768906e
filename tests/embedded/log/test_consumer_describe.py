"""``LogSystemConsumer.describe`` (``DescribingSystemConsumer``): a container asks the consumer, not the admin, for the
offsets of the partitions it is about to register, and the consumer keeps those files open for ``register``, so a
start-up opens each input partition once; it answers exactly what the admin does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.contracts.systems import DescribingSystemConsumer, StreamSpec
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.consumer import LogSystemConsumer
from millstream.embedded.log.errors import LogSystemError
from millstream.embedded.log.layout import LogLayout
from millstream.embedded.log.producer import LogSystemProducer
from millstream.embedded.log.storage import LogPartition
from millstream.model import SystemStreamPartition
from tests.embedded.log.conftest import SYSTEM, Opened, create, read_all, ssp, write


@pytest.fixture
def filled(admin: LogSystemAdmin, producer: LogSystemProducer) -> Iterator[None]:
    """``events``: partition 0 holds three records, 1 none, 2 two; ``trimmed`` lost its first record; ``sealed`` is
    sealed."""
    create(admin, "events", 3)
    write(producer, "events", [b"a", b"b", b"c"], partition=0)
    write(producer, "events", [b"d", b"e"], partition=2)
    create(admin, "trimmed")
    write(producer, "trimmed", [b"x", b"y"])
    admin.trim(ssp("trimmed"), "1")
    create(admin, "sealed")
    write(producer, "sealed", [b"z"])
    admin.seal_stream("sealed")
    yield


def test_describe_answers_what_the_admin_answers_and_leaves_out_partitions_that_do_not_exist(
    admin: LogSystemAdmin, consumer: LogSystemConsumer, filled: None
) -> None:
    present = [ssp("events", 0), ssp("events", 1), ssp("events", 2), ssp("trimmed"), ssp("sealed")]
    ssps = [*present, ssp("events", 3), ssp("missing")]
    assert isinstance(consumer, DescribingSystemConsumer)
    described = consumer.describe(ssps)
    assert described == admin.get_ssp_metadata(ssps)
    assert set(described) == set(present)
    assert described[ssp("sealed")].sealed
    assert described[ssp("trimmed")].oldest_offset == "1"
    assert described[ssp("events", 1)].newest_offset is None


def test_registering_a_described_partition_opens_no_file_again_and_reads_it_from_the_offset(
    consumer: LogSystemConsumer, filled: None, opens: Opened
) -> None:
    consumer.describe([ssp("events", 0), ssp("events", 2)])
    assert opens.order == [("events", 0), ("events", 2)]
    consumer.register(ssp("events", 0), "1")
    consumer.register(ssp("events", 2), "0")
    consumer.start()
    assert opens.order == [("events", 0), ("events", 2)]
    got = [(e.ssp.partition, e.message) for e in read_all(consumer, {ssp("events", 0), ssp("events", 2)})]
    assert [each for each in got if each[0] == 0] == [(0, b"b"), (0, b"c")]
    assert [each for each in got if each[0] == 2] == [(2, b"d"), (2, b"e")]


def test_start_closes_the_described_files_no_register_took(
    consumer: LogSystemConsumer, filled: None, opens: Opened
) -> None:
    consumer.describe([ssp("events", 0), ssp("events", 1)])
    assert opens.live == {("events", 0), ("events", 1)}
    consumer.register(ssp("events", 0), "0")
    consumer.start()
    assert opens.live == {("events", 0)}


def test_stop_closes_the_described_files_when_the_container_fails_before_registering(
    consumer: LogSystemConsumer, filled: None, opens: Opened
) -> None:
    consumer.describe([ssp("events", 0), ssp("events", 1)])
    consumer.stop()
    assert opens.live == set()


def test_describe_keeps_at_most_open_max_files_open_and_register_reopens_the_rest(
    root: Path, filled: None, opens: Opened
) -> None:
    consumer = LogSystemConsumer(SYSTEM, LogLayout(root, SYSTEM), open_max=2)
    try:
        consumer.describe([ssp("events", 0), ssp("events", 1), ssp("events", 2)])
        assert opens.live == {("events", 1), ("events", 2)}  # the least recently described closed
        for partition in range(3):
            consumer.register(ssp("events", partition), "0")
        assert opens.order == [("events", 0), ("events", 1), ("events", 2), ("events", 0)]
    finally:
        consumer.stop()


def test_a_partition_re_created_between_describe_and_register_is_registered_on_the_new_file(
    root: Path, admin: LogSystemAdmin, consumer: LogSystemConsumer, filled: None
) -> None:
    consumer.describe([ssp("trimmed")])
    admin.clear_stream(StreamSpec(SYSTEM, "trimmed", 1, {}))
    create(admin, "trimmed")
    fresh = LogPartition(LogLayout(root, SYSTEM).partition_path("trimmed", 0), "trimmed", 0)
    fresh.append_columns([0], None, [b"new"], None)
    fresh.close()
    consumer.register(ssp("trimmed"), "0")
    consumer.start()
    assert [e.message for e in read_all(consumer, {ssp("trimmed")}) if not e.is_end_of_stream] == [b"new"]


def test_describe_after_start_or_for_another_system_raises(consumer: LogSystemConsumer, filled: None) -> None:
    with pytest.raises(LogSystemError, match="cannot describe"):
        consumer.describe([SystemStreamPartition("other", "events", 0)])
    consumer.start()
    with pytest.raises(LogSystemError, match="after the consumer of system 'log' started"):
        consumer.describe([ssp("events")])

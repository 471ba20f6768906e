"""The log admin's pool of open partition files: repeated queries reuse a handle, the bound holds, and a pooled
file deleted or re-created since is never answered from."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.contracts.systems import StreamSpec, SystemStreamPartitionMetadata
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.log.layout import LogLayout
from millstream.embedded.log.producer import LogSystemProducer
from millstream.embedded.log.storage import LogPartition
from millstream.errors import MillstreamError

from .conftest import SYSTEM, create, log_config, ssp, write


class Files:
    """The admin's opener seam: counts opens per partition and the partitions open at once."""

    def __init__(self) -> None:
        self.opens: Counter[tuple[str, int]] = Counter()
        self.open_now = 0
        self.peak = 0

    def open(self, path: Path, stream: str, partition: int) -> LogPartition:
        log = CountedPartition(path, stream, partition)
        log.files = self
        self.opens[(stream, partition)] += 1
        self.open_now += 1
        self.peak = max(self.peak, self.open_now)
        return log


class CountedPartition(LogPartition):
    __slots__ = ("files",)
    files: Files

    def close(self) -> None:
        super().close()
        self.files.open_now -= 1


@pytest.fixture
def files() -> Files:
    return Files()


def pooled_admin(root: Path, files: Files, max_open: int) -> LogSystemAdmin:
    return LogSystemAdmin(SYSTEM, LogLayout(root, SYSTEM), max_open_partitions=max_open, opener=files.open)


@pytest.fixture
def pooled(root: Path, files: Files) -> Iterator[LogSystemAdmin]:
    admin = pooled_admin(root, files, 8)
    yield admin
    admin.stop()


def test_repeated_queries_of_the_same_partitions_open_each_file_once(pooled: LogSystemAdmin, files: Files) -> None:
    create(pooled, "changelog", 4)
    ssps = [ssp("changelog", partition) for partition in range(4)]
    for _ in range(50):
        for one in ssps:
            assert pooled.get_ssp_metadata([one])[one].upcoming_offset == "0"
        pooled.get_written_ssp_metadata(ssps)
        pooled.get_system_stream_metadata(["changelog"])
    assert files.opens == {("changelog", partition): 1 for partition in range(4)}


def test_a_pooled_partition_reports_records_written_since_it_was_opened(
    pooled: LogSystemAdmin, producer: LogSystemProducer
) -> None:
    create(pooled, "events")
    assert pooled.get_ssp_metadata([ssp("events")])[ssp("events")].upcoming_offset == "0"
    write(producer, "events", [b"a", b"b"])
    assert pooled.get_ssp_metadata([ssp("events")])[ssp("events")] == SystemStreamPartitionMetadata("0", "1", "2")


def test_over_a_thousand_partitions_queried_never_hold_more_files_open_than_the_bound(root: Path, files: Files) -> None:
    admin = pooled_admin(root, files, 32)
    try:
        create(admin, "wide", 1_024)
        for partition in range(1_024):
            admin.get_ssp_metadata([ssp("wide", partition)])
            assert files.open_now <= 32
        admin.get_system_stream_metadata(["wide"])
        assert files.peak <= 33  # the pool's 32 and the one a query opened before the oldest was closed
        assert files.open_now == 32
    finally:
        admin.stop()
    assert files.open_now == 0


def test_a_stream_re_created_by_another_admin_is_answered_from_its_new_files(
    pooled: LogSystemAdmin, root: Path, producer: LogSystemProducer, files: Files
) -> None:
    create(pooled, "events")
    write(producer, "events", [b"a", b"b", b"c"])
    assert pooled.get_ssp_metadata([ssp("events")])[ssp("events")].upcoming_offset == "3"
    other = LogSystemFactory().get_admin(SYSTEM, log_config(root))
    assert other.clear_stream(StreamSpec(SYSTEM, "events", 1))
    create(other, "events")
    other.stop()
    assert pooled.get_ssp_metadata([ssp("events")])[ssp("events")] == SystemStreamPartitionMetadata(None, None, "0")
    assert files.opens[("events", 0)] == 2
    assert files.open_now == 1


def test_clearing_a_stream_closes_its_pooled_files(pooled: LogSystemAdmin, files: Files) -> None:
    create(pooled, "events", 2)
    pooled.get_system_stream_metadata(["events"])
    assert files.open_now == 2
    pooled.clear_stream(StreamSpec(SYSTEM, "events", 2))
    assert files.open_now == 0


def test_a_bound_of_zero_opens_and_closes_the_file_around_each_query(root: Path, files: Files) -> None:
    admin = pooled_admin(root, files, 0)
    try:
        create(admin, "events")
        for _ in range(3):
            admin.get_ssp_metadata([ssp("events")])
            assert files.open_now == 0
        assert files.opens[("events", 0)] == 3
    finally:
        admin.stop()


def test_the_bound_comes_from_the_admin_open_partitions_max_key(root: Path) -> None:
    admin = LogSystemFactory().get_admin(SYSTEM, log_config(root, admin__open__partitions__max=7))
    assert admin.max_open_partitions == 7
    assert LogSystemFactory().get_admin(SYSTEM, log_config(root)).max_open_partitions == 256


def test_partition_counts_and_validating_a_stream_open_no_partition_file(pooled: LogSystemAdmin, files: Files) -> None:
    create(pooled, "wide", 40)
    opened_to_create = dict(files.opens)
    assert pooled.partition_counts(["wide", "absent"]) == {"wide": 40}
    pooled.validate_stream(StreamSpec(SYSTEM, "wide", 40))
    with pytest.raises(MillstreamError, match=r"'log\.wide' has 40 partitions, expected 41"):
        pooled.validate_stream(StreamSpec(SYSTEM, "wide", 41))
    assert files.opens == opened_to_create

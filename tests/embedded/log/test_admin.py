"""The log's SystemAdmin: offsets metadata, offset algebra, stream lifecycle, retention and sealing."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.contracts.systems import StreamSpec, SystemStreamPartitionMetadata
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.errors import InvalidOffsetError, InvalidStreamNameError, LogSystemError
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.log.layout import LogLayout, StreamInfo
from millstream.embedded.log.producer import LogSystemProducer
from millstream.errors import MillstreamError, StreamNotFoundError
from millstream.startpoint import StartpointOldest, StartpointSpecific, StartpointTimestamp, StartpointUpcoming

from .conftest import SYSTEM, create, envelope, log_config, ssp, write


def test_metadata_of_an_empty_partition_has_no_oldest_or_newest(admin: LogSystemAdmin) -> None:
    create(admin, "events", 2)
    metadata = admin.get_system_stream_metadata(["events"])["events"]
    assert metadata.partition_count == 2
    assert metadata.partitions[0] == SystemStreamPartitionMetadata(None, None, "0", sealed=False)


def test_metadata_gives_oldest_newest_and_upcoming_as_integer_strings(
    admin: LogSystemAdmin, producer: LogSystemProducer
) -> None:
    create(admin, "events")
    write(producer, "events", [b"a", b"b", b"c"])
    admin.trim(ssp("events"), "1")
    assert admin.get_ssp_metadata([ssp("events")])[ssp("events")] == SystemStreamPartitionMetadata("1", "2", "3")


def test_a_metadata_query_reads_each_streams_description_once(
    admin: LogSystemAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(admin, "events", 3)
    create(admin, "other", 2)
    reads: list[str] = []
    read_info = LogLayout.read_info

    def counted(layout: LogLayout, stream: str) -> StreamInfo | None:
        reads.append(stream)
        return read_info(layout, stream)

    monkeypatch.setattr(LogLayout, "read_info", counted)
    asked = [ssp("events", 0), ssp("events", 2), ssp("other", 1)]
    assert set(admin.get_ssp_metadata(asked)) == set(asked)
    assert sorted(reads) == ["events", "other"]
    reads.clear()
    assert set(admin.get_system_stream_metadata(["events"])["events"].partitions) == {0, 1, 2}
    assert reads == ["events"]


def test_metadata_leaves_out_streams_that_do_not_exist(admin: LogSystemAdmin) -> None:
    create(admin, "events")
    assert set(admin.get_system_stream_metadata(["events", "missing"])) == {"events"}


def test_offsets_after_is_the_next_integer(admin: LogSystemAdmin) -> None:
    assert admin.offsets_after({ssp("a"): "0", ssp("b", 3): "41"}) == {ssp("a"): "1", ssp("b", 3): "42"}


def test_offsets_after_rejects_an_offset_that_is_not_an_integer(admin: LogSystemAdmin) -> None:
    with pytest.raises(InvalidOffsetError, match=r"'a' partition 0: offset 'x1'"):
        admin.offsets_after({ssp("a"): "x1"})


def test_offset_comparator_compares_numerically_not_lexically(admin: LogSystemAdmin) -> None:
    assert admin.offset_comparator("9", "10") == -1
    assert admin.offset_comparator("10", "10") == 0
    assert admin.offset_comparator("100", "99") == 1


def test_offset_comparator_is_none_for_offsets_that_are_not_log_offsets(admin: LogSystemAdmin) -> None:
    assert admin.offset_comparator("1", "\0END_OF_STREAM") is None


def test_offset_for_timestamp_returns_the_first_offset_at_or_after_it(
    admin: LogSystemAdmin, producer: LogSystemProducer
) -> None:
    create(admin, "events")
    for timestamp in (100, 200, 300):
        write(producer, "events", [b"x"], timestamp=timestamp)
    assert admin.offset_for_timestamp(ssp("events"), 150) == "1"
    assert admin.offset_for_timestamp(ssp("events"), 301) == "3"


def test_create_stream_writes_stream_json_and_one_file_per_partition(admin: LogSystemAdmin, root: Path) -> None:
    assert admin.create_stream(StreamSpec(SYSTEM, "events", 3, {"cleanup.policy": "compact"}))
    info = json.loads((root / "events" / "stream.json").read_text())
    assert info["partitions"] == 3
    assert info["config"] == {"cleanup.policy": "compact"}
    assert isinstance(info["created_at_ms"], int)
    assert sorted(path.name for path in (root / "events").glob("p*.db")) == ["p0.db", "p1.db", "p2.db"]


def test_create_stream_returns_false_and_changes_nothing_when_it_exists(admin: LogSystemAdmin) -> None:
    create(admin, "events", 2)
    assert not admin.create_stream(StreamSpec(SYSTEM, "events", 5))
    assert admin.get_system_stream_metadata(["events"])["events"].partition_count == 2


def test_create_stream_rejects_names_that_are_not_plain_directory_names(admin: LogSystemAdmin) -> None:
    for name in ("", "../escape", "a/b", ".hidden"):
        with pytest.raises(InvalidStreamNameError):
            admin.create_stream(StreamSpec(SYSTEM, name, 1))


def test_create_stream_rejects_zero_partitions(admin: LogSystemAdmin) -> None:
    with pytest.raises(LogSystemError, match=r"'events' needs at least one partition"):
        admin.create_stream(StreamSpec(SYSTEM, "events", 0))


def test_validate_stream_accepts_a_matching_stream(admin: LogSystemAdmin) -> None:
    create(admin, "events", 2)
    admin.validate_stream(StreamSpec(SYSTEM, "events", 2))


def test_validate_stream_names_a_missing_stream(admin: LogSystemAdmin) -> None:
    with pytest.raises(StreamNotFoundError, match=r"'log.events'"):
        admin.validate_stream(StreamSpec(SYSTEM, "events", 2))


def test_validate_stream_names_a_partition_count_mismatch(admin: LogSystemAdmin) -> None:
    create(admin, "events", 2)
    with pytest.raises(MillstreamError, match=r"'log.events' has 2 partitions, expected 4"):
        admin.validate_stream(StreamSpec(SYSTEM, "events", 4))


def test_clear_stream_deletes_the_stream_and_reports_whether_there_was_one(admin: LogSystemAdmin, root: Path) -> None:
    create(admin, "events")
    assert admin.clear_stream(StreamSpec(SYSTEM, "events"))
    assert not (root / "events").exists()
    assert admin.get_system_stream_metadata(["events"]) == {}
    assert not admin.clear_stream(StreamSpec(SYSTEM, "events"))


def test_a_cleared_stream_can_be_created_again_empty(admin: LogSystemAdmin, producer: LogSystemProducer) -> None:
    create(admin, "events")
    write(producer, "events", [b"a"])
    admin.clear_stream(StreamSpec(SYSTEM, "events"))
    create(admin, "events")
    assert admin.get_ssp_metadata([ssp("events")])[ssp("events")].upcoming_offset == "0"


def test_list_streams_names_created_streams_only(admin: LogSystemAdmin, root: Path) -> None:
    assert admin.list_streams() == []
    create(admin, "b")
    create(admin, "a")
    (root / "not-a-stream").mkdir()
    (root / ".staging-c-123").mkdir()
    assert admin.list_streams() == ["a", "b"]


def test_trim_moves_oldest_forward_and_returns_it(admin: LogSystemAdmin, producer: LogSystemProducer) -> None:
    create(admin, "events")
    write(producer, "events", [b"a", b"b", b"c"])
    assert admin.trim(ssp("events"), "2") == "2"
    assert admin.get_ssp_metadata([ssp("events")])[ssp("events")].oldest_offset == "2"


def test_trim_never_deletes_beyond_the_newest_record_nor_reuses_offsets(
    admin: LogSystemAdmin, producer: LogSystemProducer
) -> None:
    create(admin, "events")
    write(producer, "events", [b"a", b"b"])
    assert admin.trim(ssp("events"), "10") == "2"
    write(producer, "events", [b"c"])
    assert admin.get_ssp_metadata([ssp("events")])[ssp("events")] == SystemStreamPartitionMetadata("2", "2", "3")


def test_trim_of_a_missing_stream_raises_stream_not_found(admin: LogSystemAdmin) -> None:
    with pytest.raises(StreamNotFoundError, match=r"'log.events'"):
        admin.trim(ssp("events"), "1")


def test_trim_of_a_partition_the_stream_lacks_names_the_partition(admin: LogSystemAdmin) -> None:
    create(admin, "events", 2)
    with pytest.raises(LogSystemError, match=r"'events' has partitions 0..1, not partition 5"):
        admin.trim(ssp("events", 5), "1")


def test_seal_marks_every_partition_sealed(admin: LogSystemAdmin) -> None:
    create(admin, "events", 3)
    admin.seal_stream("events")
    partitions = admin.get_system_stream_metadata(["events"])["events"].partitions
    assert all(metadata.sealed for metadata in partitions.values())


def test_seal_of_a_missing_stream_raises_stream_not_found(admin: LogSystemAdmin) -> None:
    with pytest.raises(StreamNotFoundError):
        admin.seal_stream("events")


def test_trim_expired_removes_records_older_than_the_system_retention(root: Path) -> None:
    config = log_config(root, retention__ms=1000)
    admin = LogSystemFactory().get_admin(SYSTEM, config)
    producer = LogSystemFactory().get_producer(SYSTEM, config)
    create(admin, "events")
    for timestamp in (1_000, 2_000, 8_000, 9_500):
        write(producer, "events", [b"x"], timestamp=timestamp)
    assert admin.trim_expired(now_ms=10_000) == {ssp("events"): "3"}
    assert admin.trim_expired(now_ms=10_000) == {}
    producer.stop()


def test_trim_expired_keeps_everything_without_a_retention(admin: LogSystemAdmin, producer: LogSystemProducer) -> None:
    create(admin, "events")
    write(producer, "events", [b"x"], timestamp=1)
    assert admin.trim_expired(now_ms=10**12) == {}


def test_trim_expired_uses_a_streams_own_retention_over_the_systems(root: Path) -> None:
    config = log_config(root, retention__ms=100_000)
    admin = LogSystemFactory().get_admin(SYSTEM, config)
    producer = LogSystemFactory().get_producer(SYSTEM, config)
    create(admin, "short", config={"retention.ms": "10"})
    create(admin, "long")
    for stream in ("short", "long"):
        write(producer, stream, [b"x", b"y"], timestamp=1_000)
    assert admin.trim_expired(now_ms=2_000) == {ssp("short"): "2"}
    producer.stop()


def test_trim_expired_spares_changelog_streams(root: Path) -> None:
    config = log_config(root, retention__ms=10)
    admin = LogSystemFactory().get_admin(SYSTEM, config)
    producer = LogSystemFactory().get_producer(SYSTEM, config)
    create(admin, "store-changelog", config={"cleanup.policy": "compact"})
    write(producer, "store-changelog", [b"x"], timestamp=1)
    assert admin.trim_expired(now_ms=10**12) == {}
    producer.stop()


def test_generic_startpoints_resolve_to_offsets_even_inside_a_batch(admin: LogSystemAdmin, root: Path) -> None:
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root, producer__batch__size=3))
    create(admin, "events")
    for timestamp in (100, 200, 300, 400, 500, 600):  # two batches of three
        producer.send("t", envelope("events", b"x", timestamp=timestamp))
    producer.stop()
    admin.trim(ssp("events"), "1")
    assert admin.resolve_startpoint(ssp("events"), StartpointOldest()) == "1"
    assert admin.resolve_startpoint(ssp("events"), StartpointUpcoming()) == "6"
    assert admin.resolve_startpoint(ssp("events"), StartpointTimestamp(250)) == "2"
    assert admin.resolve_startpoint(ssp("events"), StartpointTimestamp(450)) == "4"
    assert admin.resolve_startpoint(ssp("events"), StartpointTimestamp(50)) == "1"
    assert admin.resolve_startpoint(ssp("events"), StartpointSpecific("3")) == "3"


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(min_value=1, max_value=4), st.lists(st.integers(0, 50), min_size=1, max_size=8)),
        min_size=1,
        max_size=5,
    ),
    st.integers(min_value=0, max_value=12),
    st.integers(min_value=0, max_value=60),
    st.integers(min_value=0, max_value=60),
)
def test_trim_expired_stops_at_the_first_record_within_retention_wherever_batches_begin(
    appends: list[tuple[int, list[int]]], trim_first: int, retention: int, now: int
) -> None:
    """Timestamps out of order, batches of mixed sizes, an earlier trim inside a batch."""
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        admin = LogSystemFactory().get_admin(SYSTEM, log_config(root, retention__ms=retention))
        create(admin, "events")
        timestamps: list[int] = []
        for batch_size, batch in appends:
            producer = LogSystemFactory().get_producer(SYSTEM, log_config(root, producer__batch__size=batch_size))
            for timestamp in batch:
                producer.send("t", envelope("events", b"x", timestamp=timestamp))
            producer.stop()
            timestamps.extend(batch)
        oldest = int(admin.trim(ssp("events"), str(trim_first)))
        retained = [offset for offset in range(oldest, len(timestamps)) if timestamps[offset] >= now - retention]
        expected = retained[0] if retained else len(timestamps)
        assert admin.offset_for_timestamp(ssp("events"), now - retention) == str(expected)
        assert admin.trim_expired(now_ms=now) == ({ssp("events"): str(expected)} if expected > oldest else {})
        metadata = admin.get_ssp_metadata([ssp("events")])[ssp("events")]
        assert int(metadata.upcoming_offset) == len(timestamps)
        assert metadata.oldest_offset == (str(expected) if expected < len(timestamps) else None)


def test_an_intermediate_stream_keeps_its_records_whatever_the_system_retention(root: Path) -> None:
    config = log_config(root, retention__ms=10)
    admin = LogSystemFactory().get_admin(SYSTEM, config)
    producer = LogSystemFactory().get_producer(SYSTEM, config)
    spec = StreamSpec(SYSTEM, "app-by-user", 1, intermediate=True)
    assert admin.create_stream(spec)
    write(producer, "app-by-user", [b"x", b"y"], timestamp=1)  # a backfill: event time long past
    assert admin.trim_expired(now_ms=10**12) == {}
    admin.validate_stream(spec)
    producer.stop()


def test_an_intermediate_stream_that_expires_records_is_refused_naming_it(root: Path) -> None:
    admin = LogSystemFactory().get_admin(SYSTEM, log_config(root, retention__ms=10))
    create(admin, "app-by-user")
    with pytest.raises(LogSystemError, match="log stream 'app-by-user' is an intermediate stream but expires records"):
        admin.validate_stream(StreamSpec(SYSTEM, "app-by-user", 1, intermediate=True))


def test_delete_messages_removes_each_partitions_records_below_the_offset(
    admin: LogSystemAdmin, producer: LogSystemProducer
) -> None:
    create(admin, "events", 2)
    for partition in (0, 1):
        write(producer, "events", [b"a", b"b", b"c"], partition=partition)
    assert admin.delete_messages({ssp("events", 0): "2", ssp("events", 1): "3"})
    partitions = admin.get_system_stream_metadata(["events"])["events"].partitions
    assert [(p.oldest_offset, p.upcoming_offset) for p in partitions.values()] == [("2", "3"), (None, "3")]

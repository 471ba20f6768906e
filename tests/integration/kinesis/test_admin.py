"""The Kinesis admin against kinesalite: streams, slots, shards and lineage, positions, startpoints."""

from __future__ import annotations

import time

import pytest

from millstream.connectors.kinesis.admin import SLOT_METADATA
from millstream.connectors.kinesis.errors import KinesisOffsetError, KinesisSystemError
from millstream.connectors.kinesis.offsets import StartpointMarker
from millstream.contracts.startpoints import (
    StartpointOldest,
    StartpointSpecific,
    StartpointTimestamp,
    StartpointUpcoming,
)
from millstream.contracts.systems import StreamSpec
from millstream.errors import StreamNotFoundError
from millstream.model import SystemStreamPartition
from tests.integration.kinesis.helpers import SYSTEM, create_stream, kinesis_config, put, started_admin

pytestmark = pytest.mark.integration


@pytest.fixture
def config(kinesis_endpoint, tmp_path):
    return kinesis_config(kinesis_endpoint, tmp_path)


@pytest.fixture
def admin(config):
    admin = started_admin(config)
    yield admin
    admin.stop()


def test_create_list_describe_validate_and_clear_a_stream(admin, stream_name):
    stream = stream_name()
    spec = StreamSpec(SYSTEM, stream, 3)
    assert admin.create_stream(spec) is True
    assert admin.create_stream(spec) is False
    assert stream in admin.list_streams()
    description = admin.describe_stream(stream)
    assert description is not None and description.status == "ACTIVE" and description.open_shard_count == 3
    admin.validate_stream(StreamSpec(SYSTEM, stream, 99))  # shard counts change: not validated
    assert admin.clear_stream(spec) is True
    assert admin.describe_stream(stream) is None
    assert admin.clear_stream(spec) is False
    with pytest.raises(StreamNotFoundError, match=stream):
        admin.validate_stream(spec)


def test_partitions_are_slots_one_per_open_shard_per_container(kinesis_endpoint, tmp_path, stream_name):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 2)
    admin = started_admin(kinesis_config(kinesis_endpoint, tmp_path, job__container__count=3))
    assert admin.partitions_are_fixed is False
    metadata = admin.get_system_stream_metadata([stream, "no-such-stream"])
    assert set(metadata) == {stream}
    assert metadata[stream].partition_count == 6
    assert set(metadata[stream].partitions.values()) == {SLOT_METADATA}
    admin.split_shard(stream, "shardId-000000000000")
    assert admin.get_system_stream_metadata([stream])[stream].partition_count == 9
    slot = SystemStreamPartition(SYSTEM, stream, 40)
    missing = SystemStreamPartition(SYSTEM, "no-such-stream", 0)
    assert admin.get_ssp_metadata([slot, missing]) == {slot: SLOT_METADATA}, "any slot of an existing stream"


def test_shards_carry_parent_and_adjacent_parent_lineage_and_hash_ranges_after_split_and_merge(admin, stream_name):
    stream = stream_name()
    admin.create_stream(StreamSpec(SYSTEM, stream, 2))
    before = {shard.shard_id: shard for shard in admin.list_shards(stream)}
    assert before["shardId-000000000000"].starting_hash_key == 0
    assert before["shardId-000000000001"].ending_hash_key == 2**128 - 1
    assert before["shardId-000000000000"].ending_hash_key + 1 == before["shardId-000000000001"].starting_hash_key

    admin.split_shard(stream, "shardId-000000000000")
    admin.merge_shards(stream, "shardId-000000000003", "shardId-000000000001")
    shards = {shard.shard_id: shard for shard in admin.list_shards(stream)}
    assert shards["shardId-000000000000"].closed and shards["shardId-000000000001"].closed
    assert shards["shardId-000000000002"].parent_shard_id == "shardId-000000000000"
    assert shards["shardId-000000000003"].parents == ("shardId-000000000000",)
    merged = shards["shardId-000000000004"]
    assert merged.parents == ("shardId-000000000003", "shardId-000000000001")
    assert merged.starting_hash_key == shards["shardId-000000000003"].starting_hash_key
    assert merged.ending_hash_key == 2**128 - 1
    assert not merged.closed
    with pytest.raises(KinesisSystemError, match="shardId-000000000009"):
        admin.split_shard(stream, "shardId-000000000009")


def test_oldest_and_newest_positions_of_open_closed_and_empty_shards(admin, kinesis_endpoint, stream_name):
    stream = stream_name()
    admin.create_stream(StreamSpec(SYSTEM, stream, 1))
    shard = "shardId-000000000000"
    empty = admin.shard_positions(stream, shard)
    assert (empty.oldest_sequence_number, empty.newest_sequence_number, empty.closed) == (None, None, False)
    written = [r["SequenceNumber"] for r in put(kinesis_endpoint, stream, [("k", b"1"), ("k", b"2"), ("k", b"3")])]
    positions = admin.shard_positions(stream, shard)
    assert (positions.oldest_sequence_number, positions.newest_sequence_number) == (written[0], written[-1])
    admin.split_shard(stream, shard)
    closed = admin.shard_positions(stream, shard)
    assert closed.closed and (closed.oldest_sequence_number, closed.newest_sequence_number) == (written[0], written[-1])


def test_sequence_number_at_a_timestamp(admin, kinesis_endpoint, stream_name):
    stream = stream_name()
    admin.create_stream(StreamSpec(SYSTEM, stream, 1))
    shard = "shardId-000000000000"
    put(kinesis_endpoint, stream, [("k", b"early")])
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    (late,) = put(kinesis_endpoint, stream, [("k", b"late")])
    assert admin.sequence_number_at(stream, shard, middle) == late["SequenceNumber"]
    assert admin.sequence_number_at(stream, shard, int(time.time() * 1000)) is None
    assert admin.sequence_number_at(stream, shard, int(time.time() * 1000) + 60_000) is None


def test_offsets_are_composites_compared_on_their_common_shards(admin):
    a1, a2 = "shardId-000000000001:100@1", "shardId-000000000001:200@1"
    assert admin.offset_comparator(a1, a2) == -1
    assert admin.offset_comparator(a2, a1) == 1
    assert admin.offset_comparator(a1, "shardId-000000000001:100") == 0, "the lease token does not order"
    both = "shardId-000000000001:200@1,shardId-000000000002:5@2"
    assert admin.offset_comparator(a1, both) == -1
    assert admin.offset_comparator("shardId-000000000001:300,shardId-000000000002:1", both) is None
    assert admin.offset_comparator(a1, "shardId-000000000002:5") is None, "no shard in common"
    assert admin.offset_comparator("TRIM_HORIZON", a1) is None
    ssp = SystemStreamPartition(SYSTEM, "s", 0)
    assert admin.offsets_after({ssp: both}) == {ssp: both}, "the consumer resumes from its lease table"
    with pytest.raises(KinesisOffsetError, match="not a Kinesis offset"):
        admin.offsets_after({ssp: "42"})
    assert admin.offset_for_timestamp(ssp, 1234) == "AT_TIMESTAMP:1234"


def test_startpoints_of_every_type_resolve_to_markers_the_consumer_applies(admin):
    ssp = SystemStreamPartition(SYSTEM, "s", 3)
    oldest = StartpointMarker.parse(admin.resolve_startpoint(ssp, StartpointOldest(creation_timestamp=7)))
    assert (oldest.kind, oldest.created_ms) == ("oldest", 7)
    upcoming = StartpointMarker.parse(admin.resolve_startpoint(ssp, StartpointUpcoming(creation_timestamp=8)))
    assert upcoming.kind == "upcoming"
    at = StartpointMarker.parse(admin.resolve_startpoint(ssp, StartpointTimestamp(1_700_000_000_000)))
    assert (at.kind, at.timestamp_ms) == ("timestamp", 1_700_000_000_000)
    specific = StartpointMarker.parse(
        admin.resolve_startpoint(ssp, StartpointSpecific("shardId-000000000002:42@3,shardId-000000000001:7"))
    )
    assert specific.kind == "specific"
    assert specific.positions == {"shardId-000000000001": "7", "shardId-000000000002": "42"}
    assert oldest.identity != StartpointMarker.parse(str(StartpointMarker("oldest", 9))).identity
    with pytest.raises(KinesisOffsetError, match="shardId:sequenceNumber"):
        admin.resolve_startpoint(ssp, StartpointSpecific("12"))


def test_a_throttled_control_call_is_retried_and_counted(admin, stream_name, monkeypatch):
    from botocore.exceptions import ClientError

    stream = stream_name()
    admin.create_stream(StreamSpec(SYSTEM, stream, 1))
    client = admin.clients.client
    real = client.list_shards
    calls = []

    def throttled_once(**arguments):
        calls.append(arguments)
        if len(calls) == 1:
            raise ClientError({"Error": {"Code": "LimitExceededException", "Message": "slow down"}}, "ListShards")
        return real(**arguments)

    monkeypatch.setattr(client, "list_shards", throttled_once)
    assert [shard.shard_id for shard in admin.list_shards(stream)] == ["shardId-000000000000"]
    assert len(calls) == 2
    assert admin.metrics.snapshot()["throttled_by_operation"] == {"ListShards": 1}

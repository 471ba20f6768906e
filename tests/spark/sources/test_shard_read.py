"""A DataFrame read of a stream whose partitions split and merge asks the admin's ``ShardedSystemAdmin``
capability, never the system's name: the Kinesis admin has it, the fixed-partition admins do not, and an
admin of partitions that come and go without it is refused naming the stream. (Reads of real shards through
the capability: ``tests/integration/kinesis/test_dataframe_read.py`` and ``test_streaming_source.py``.)"""

from __future__ import annotations

import pytest

from millstream.connectors.kafka.admin import KafkaSystemAdmin
from millstream.connectors.kinesis.admin import KinesisSystemAdmin
from millstream.contracts.systems import ShardedSystemAdmin
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.model import SystemStream
from millstream.spark.sources.read_bounds import StreamReadError
from millstream.spark.sources.shard_read import sharded_admin


def test_the_admin_whose_partitions_come_and_go_has_the_sharded_capability_and_the_fixed_ones_do_not():
    assert not KinesisSystemAdmin.partitions_are_fixed and issubclass(KinesisSystemAdmin, ShardedSystemAdmin)
    assert [admin for admin in (LogSystemAdmin, KafkaSystemAdmin) if issubclass(admin, ShardedSystemAdmin)] == []


def test_an_admin_without_the_sharded_capability_is_refused_naming_the_stream_and_the_admin():
    class Unsharded:
        partitions_are_fixed = False

    with pytest.raises(StreamReadError, match=r"'plugin\.clicks'.*Unsharded.*ShardedSystemAdmin"):
        sharded_admin(Unsharded(), SystemStream("plugin", "clicks"))


def test_startpoint_offsets_name_shards_and_their_sequence_numbers_or_say_why_not():
    offsets = KinesisSystemAdmin.shard_offsets("shardId-000000000001:49590,shardId-000000000002:17")
    assert offsets == {"shardId-000000000001": "49590", "shardId-000000000002": "17"}
    with pytest.raises(ValueError, match="not shardId:sequenceNumber"):
        KinesisSystemAdmin.shard_offsets("17")

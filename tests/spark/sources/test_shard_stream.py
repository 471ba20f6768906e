"""The Kinesis streaming source's planning, shard by shard (no Kinesis, no Spark): a child is read only from
the batch after the one that read its parents to their end; startpoints move every listed shard."""

from __future__ import annotations

import pytest

from millstream.connectors.kinesis.admin import KinesisSystemAdmin
from millstream.connectors.kinesis.shards import Shard
from millstream.contracts.startpoints import StartpointOldest, StartpointSpecific, StartpointUpcoming
from millstream.spark.sources.read_bounds import StreamReadError
from millstream.spark.sources.shard_stream import TRIM_HORIZON, ShardOffset, _apply, _plan


def shard(shard_id: str, *parents: str, closed: bool = False) -> Shard:
    return Shard(
        shard_id,
        parents[0] if parents else None,
        parents[1] if len(parents) > 1 else None,
        0,
        1,
        "0",
        "9" if closed else None,
    )


SPLIT = [shard("s-0", closed=True), shard("s-1", "s-0"), shard("s-2", "s-0")]


def planned(start: ShardOffset, shards: list[Shard], at: int) -> ShardOffset:
    offset = ShardOffset(at, {}, [], {k: dict(v) for k, v in start.shards.items()}, list(start.finished))
    _plan(offset, shards, at, "kinesis.clicks")
    return offset


def test_children_wait_for_the_batch_after_their_parent_is_read_to_its_end():
    start = ShardOffset(100, shards={"s-0": {"start": {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": 101}}})
    start.shards["s-0"]["active"] = True
    first = planned(start, SPLIT, 200)
    assert set(first.read) == {"s-0"} and first.closing == ["s-0"] and first.finished == ["s-0"]
    assert first.shards == {
        "s-1": {"start": TRIM_HORIZON, "active": True},
        "s-2": {"start": TRIM_HORIZON, "active": True},
    }
    second = planned(first, SPLIT, 300)
    assert second.read == {"s-1": TRIM_HORIZON, "s-2": TRIM_HORIZON} and second.closing == []
    assert {state["start"]["Timestamp"] for state in second.shards.values()} == {301}


def test_a_plan_at_the_same_instant_reads_nothing_more():
    offset = ShardOffset(0)
    _apply(offset, SPLIT, StartpointOldest(), 0, KinesisSystemAdmin.shard_offsets)
    batches = [planned(offset, SPLIT, 50)]
    while len(batches) < 5 and batches[-1].read:
        batches.append(planned(batches[-1], SPLIT, 50))
    assert [set(batch.read) for batch in batches] == [{"s-0"}, {"s-1", "s-2"}, set()]
    assert batches[-1].to_json() == planned(batches[-1], SPLIT, 50).to_json(), "availableNow ends"


def test_upcoming_skips_closed_shards_and_reads_open_ones_after_the_planning():
    offset = ShardOffset(0)
    _apply(offset, SPLIT, StartpointUpcoming(), 70, KinesisSystemAdmin.shard_offsets)
    assert offset.finished == ["s-0"]
    assert planned(offset, SPLIT, 70).read == {}


def test_a_specific_startpoint_counts_ancestors_read_and_restarts_descendants():
    offset = ShardOffset(0, finished=["s-0"], shards={"s-1": {"start": TRIM_HORIZON, "active": True}})
    _apply(offset, SPLIT, StartpointSpecific("s-0:5"), 80, KinesisSystemAdmin.shard_offsets)
    plan = planned(offset, SPLIT, 90)
    assert plan.read == {"s-0": {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": "5"}}
    assert {shard_id: state["active"] for shard_id, state in plan.shards.items()} == {"s-1": True, "s-2": True}


def test_a_shard_that_expired_before_it_was_read_to_its_end_is_an_error_naming_it():
    offset = ShardOffset(0)
    _apply(offset, SPLIT, StartpointOldest(), 0, KinesisSystemAdmin.shard_offsets)
    with pytest.raises(StreamReadError, match=r"kinesis\.clicks.*s-0.*lost"):
        planned(offset, SPLIT[1:], 50)  # the parent left the listing before its records were read
    first = planned(offset, SPLIT, 50)
    assert planned(first, SPLIT[1:], 60).read == {"s-1": TRIM_HORIZON, "s-2": TRIM_HORIZON}, "read, then gone: fine"

"""The Kinesis system's pure parts, no emulator needed: offsets, slots, lineage, balancing, read limits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from millstream.connectors.kinesis.allocation import SlotAllocationError, SlotAllocator
from millstream.connectors.kinesis.leases import CounterObserver, Lease, balance, readable_shards
from millstream.connectors.kinesis.offsets import (
    ShardOffset,
    ShardPosition,
    StartpointMarker,
    compare_offsets,
    format_offset,
    parse_offset,
)
from millstream.connectors.kinesis.shards import Shard, ShardLineage, hash_key_of
from millstream.connectors.kinesis.throttling import Backoff, ShardReadLimiter
from millstream.model import SystemStreamPartition

pytestmark = pytest.mark.integration

SHARDS = st.sampled_from([f"shardId-{i:012d}" for i in range(4)])
ENTRIES = st.dictionaries(SHARDS, st.integers(0, 10**40), min_size=1)


def offset_of(entries: dict[str, int]) -> str:
    return format_offset({shard: ShardOffset(shard, str(seq), 1) for shard, seq in entries.items()})


@given(ENTRIES)
def test_an_offset_round_trips_through_its_string(entries):
    parsed = parse_offset(offset_of(entries))
    assert {shard: int(entry.sequence_number) for shard, entry in parsed.items()} == entries
    assert all(entry.lease_token == 1 for entry in parsed.values())


@given(ENTRIES, ENTRIES)
def test_offset_order_is_antisymmetric_and_agrees_with_every_common_shard(first, second):
    a, b = offset_of(first), offset_of(second)
    order = compare_offsets(a, b)
    reverse = compare_offsets(b, a)
    assert (order is None) == (reverse is None)
    if order is not None:
        assert reverse is not None and order == -reverse
        common = first.keys() & second.keys()
        assert common
        assert all((first[s] > second[s]) - (first[s] < second[s]) in (order, 0) for s in common)


@given(ENTRIES)
def test_an_offset_equals_itself(entries):
    assert compare_offsets(offset_of(entries), offset_of(entries)) == 0


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("42", "not shardId:sequenceNumber"),
        ("shardId-1:12x", "not a sequence number"),
        ("shardId-1:12@x", "not a lease token"),
        ("shardId-1:1,shardId-1:2", "appears twice"),
    ],
)
def test_a_string_that_is_not_an_offset_is_refused_saying_why(text, reason):
    with pytest.raises(ValueError, match=reason):
        parse_offset(text)


def test_startpoint_markers_round_trip_and_have_distinct_identities():
    markers = [
        StartpointMarker("oldest", 1),
        StartpointMarker("upcoming", 1),
        StartpointMarker("timestamp", 1, timestamp_ms=5),
        StartpointMarker("specific", 1, positions={"shardId-000000000001": "9"}),
    ]
    assert [StartpointMarker.parse(str(m)) for m in markers] == markers
    assert len({m.identity for m in markers}) == 4
    with pytest.raises(ValueError):
        StartpointMarker.parse("startpoint:sideways:1")


def test_positions_round_trip_through_the_lease_record():
    for position in (
        ShardPosition.trim_horizon(),
        ShardPosition.latest(),
        ShardPosition.at_timestamp(123),
        ShardPosition.at_sequence_number("9"),
        ShardPosition.after_sequence_number("10"),
        ShardPosition.shard_end(),
    ):
        lease = Lease("shardId-000000000000", "w", 3, 2, position, ("p",), "1")
        assert Lease.from_bytes(lease.to_bytes(), "test") == lease
    assert ShardPosition.after_sequence_number("10").checkpointed_sequence_number == 10
    with pytest.raises(ValueError, match="needs a sequence number"):
        ShardPosition.from_json({"type": "AT_SEQUENCE_NUMBER"})


def slots(count: int) -> list[SystemStreamPartition]:
    return [SystemStreamPartition("kinesis", "s", p) for p in range(count)]


def test_a_shard_takes_a_free_slot_first_and_shares_the_least_shared_one_when_none_is_free():
    allocator = SlotAllocator("s", slots(2))
    assert allocator.allocate("a").partition == 0
    assert allocator.allocate("b").partition == 1
    assert allocator.free_slots == []
    assert allocator.allocate("c").partition == 0
    assert allocator.allocate("d").partition == 1
    assert allocator.allocate("e").partition == 0
    assert allocator.shards_of(slots(2)[0]) == ["a", "c", "e"]
    allocator.release("b")
    allocator.release("d")
    assert allocator.free_slots == [slots(2)[1]]
    assert allocator.allocate("f").partition == 1, "a freed slot is taken before sharing"


def test_releasing_a_shard_twice_or_allocating_it_twice_is_a_bug_named_by_shard():
    allocator = SlotAllocator("s", slots(1))
    allocator.allocate("a")
    with pytest.raises(SlotAllocationError, match=r"'a'.*already has a slot"):
        allocator.allocate("a")
    allocator.release("a")
    with pytest.raises(SlotAllocationError, match=r"'a'.*holds no slot"):
        allocator.release("a")


def shard(shard_id: str, *parents: str, closed: bool = False) -> Shard:
    parent, adjacent = [*parents, None, None][:2]
    return Shard(shard_id, parent, adjacent, 0, 1, "1", "2" if closed else None)


def lease(shard_id: str, finished: bool = False) -> Lease:
    position = ShardPosition.shard_end() if finished else ShardPosition.trim_horizon()
    return Lease(shard_id, None, 0, 0, position)


def test_children_are_readable_only_once_every_listed_parent_is_finished():
    lineage = ShardLineage(
        [shard("0", closed=True), shard("1", closed=True), shard("2", "0"), shard("3", "1", "0"), shard("4", "9")]
    )
    assert readable_shards(lineage, {}) == ["0", "1", "4"], "a parent without a lease is not finished"
    assert readable_shards(lineage, {"0": lease("0", True)}) == ["1", "2", "4"]
    assert readable_shards(lineage, {"0": lease("0", True), "1": lease("1", True)}) == ["2", "3", "4"]
    assert lineage.children("0") == ["2", "3"] and lineage.descendants("1") == {"3"}


def test_balancing_aims_at_a_fair_share_and_the_most_loaded_worker_sheds():
    readable = ["a", "b", "c", "d"]
    first = balance("w1", readable, dict.fromkeys(readable), ["w1", "w2"])
    assert len(first.take) == 2 and first.shed == [] and first.target == 2
    owners = {"a": "w1", "b": "w1", "c": "w1", "d": "w1"}
    assert balance("w1", readable, owners, ["w1", "w2"]).shed == ["c", "d"], "above the ceiling"
    owners = {"a": "w1", "b": "w1", "c": "w2", "d": "w2"}
    assert balance("w1", readable, owners, ["w1", "w2", "w3"]).shed == ["b"], (
        "w3 has none: w1 (first of the most loaded)"
    )
    assert balance("w2", readable, owners, ["w1", "w2", "w3"]).shed == []
    assert balance("w3", readable, owners, ["w1", "w2", "w3"]).take == []
    free = {"a": "w1", "b": None, "c": "w2", "d": "w2"}
    assert balance("w1", readable, free, ["w1", "w2"], not_now=["b"]).take == [], "just shed: not taken back"
    assert balance("w3", readable, free, ["w1", "w2", "w3"]).take == ["b"]


def test_a_record_is_stale_once_its_counter_stood_still_for_a_whole_duration():
    observer = CounterObserver(duration=10)
    observer.observe("lease", 1, now=100)
    assert not observer.expired("lease", now=105)
    observer.observe("lease", 2, now=105)
    assert not observer.expired("lease", now=114)
    assert observer.expired("lease", now=115.5)
    assert not observer.expired("never-seen", now=1000)


def test_the_read_limiter_spaces_calls_by_the_calls_and_the_bytes_per_second():
    now = [0.0]
    limiter = ShardReadLimiter(calls_per_second=5, bytes_per_second=1000, clock=lambda: now[0])
    assert limiter.delay() == 0
    limiter.record_call(0)
    assert limiter.delay() == pytest.approx(0.2)
    now[0] = 0.2
    limiter.record_call(3000)
    assert limiter.delay() == pytest.approx(3.0), "3000 bytes at 1000 B/s"
    now[0] = 3.2
    assert limiter.delay() == 0


def test_backoff_grows_exponentially_up_to_its_cap_and_resets():
    backoff = Backoff(0.1, 1.0)
    delays = [backoff.next_delay() for _ in range(8)]
    assert 0.05 <= delays[0] <= 0.1 and all(0.5 <= d <= 1.0 for d in delays[4:])
    backoff.reset()
    assert backoff.next_delay() <= 0.1


def test_a_partition_key_hashes_into_exactly_one_open_shard_as_kinesis_does():
    assert hash_key_of("") == 0xD41D8CD98F00B204E9800998ECF8427E
    half = 2**127
    lineage = ShardLineage([Shard("0", None, None, 0, half - 1, "1"), Shard("1", None, None, half, 2**128 - 1, "1")])
    for key in ("a", "b", "user-42"):
        expected = "0" if hash_key_of(key) < half else "1"
        shard = lineage.shard_for_key(key)
        assert shard is not None and shard.shard_id == expected

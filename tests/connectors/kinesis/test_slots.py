"""The slot queues between shard readers and ``poll``: order, composite offsets, back-pressure, letting go."""

from __future__ import annotations

import pytest

from millstream.connectors.kinesis.errors import KinesisReadError, KinesisSystemError
from millstream.connectors.kinesis.offsets import parse_offset
from millstream.connectors.kinesis.slots import SEQUENCE_NUMBER_HEADER, SHARD_ID_HEADER, SlotQueues

from .conftest import SYSTEM, in_thread, owned, records, slot


def queues(*partitions: int, buffer_size: int = 100) -> SlotQueues:
    result = SlotQueues(SYSTEM, buffer_size)
    for partition in partitions:
        result.add(slot(partition))
    return result


def test_take_hands_out_batches_in_enqueue_order_and_at_most_the_limit_per_slot() -> None:
    slots = queues(0)
    shard = owned("shardId-0")
    assert slots.enqueue(shard, records(1, 2, 3))
    assert slots.enqueue(shard, records(4, 5))
    first = slots.take({slot(0)}, 4, timeout=0)[slot(0)]
    second = slots.take({slot(0)}, 4, timeout=0)[slot(0)]
    assert [e.message for e in first + second] == [b"r1", b"r2", b"r3", b"r4", b"r5"]
    assert len(first) == 4
    assert slots.take({slot(0)}, 4, timeout=0) == {}


def test_an_envelope_carries_its_shard_and_sequence_number_as_headers_and_offset() -> None:
    slots = queues(0)
    slots.enqueue(owned("shardId-0", token=3), records(7))
    (envelope,) = slots.take({slot(0)}, 10, timeout=0)[slot(0)]
    assert envelope.headers == {SHARD_ID_HEADER: b"shardId-0", SEQUENCE_NUMBER_HEADER: b"7"}
    assert envelope.key == b"k"
    entry = parse_offset(envelope.offset)["shardId-0"]
    assert (entry.sequence_number, entry.lease_token) == ("7", 3)


def test_an_offset_in_a_shared_slot_names_the_last_enqueued_record_of_every_shard_of_the_slot() -> None:
    slots = queues(0)
    a, b = owned("shardId-a", token=1), owned("shardId-b", token=2)
    slots.enqueue(a, records(10))
    slots.enqueue(b, records(20, 21))
    slots.enqueue(a, records(11))
    offsets = [parse_offset(e.offset) for e in slots.take({slot(0)}, 10, timeout=0)[slot(0)]]
    named = [{shard: (entry.sequence_number, entry.lease_token) for shard, entry in o.items()} for o in offsets]
    assert named == [
        {"shardId-a": ("10", 1)},
        {"shardId-a": ("10", 1), "shardId-b": ("20", 2)},
        {"shardId-a": ("10", 1), "shardId-b": ("21", 2)},
        {"shardId-a": ("11", 1), "shardId-b": ("21", 2)},
    ]


def test_a_reader_waits_while_its_slot_is_full_and_goes_on_once_poll_takes_from_it() -> None:
    slots = queues(0, buffer_size=2)
    shard = owned("shardId-0")
    slots.enqueue(shard, records(1, 2))
    thread, result = in_thread(lambda: slots.wait_for_space(shard))
    thread.join(0.2)
    assert thread.is_alive(), "a full slot holds the reader back"
    slots.take({slot(0)}, 1, timeout=0)
    thread.join(5)
    assert result == [True]


def test_a_reader_waiting_for_space_gives_up_when_told_to_stop() -> None:
    slots = queues(0, buffer_size=1)
    shard = owned("shardId-0")
    slots.enqueue(shard, records(1))
    thread, result = in_thread(lambda: slots.wait_for_space(shard))
    shard.stop.set()
    thread.join(5)
    assert result == [False]


def test_a_shard_detached_with_purge_loses_its_queued_batches_but_not_those_of_the_shard_sharing_its_slot() -> None:
    slots = queues(0)
    lost, kept = owned("shardId-a"), owned("shardId-b")
    slots.enqueue(lost, records(1))
    slots.enqueue(kept, records(2))
    with slots.lock:
        slots.detach(lost, purge=True)
    assert not slots.enqueue(lost, records(3)), "a shard let go never enqueues again"
    assert not slots.wait_for_space(lost)
    slots.enqueue(kept, records(4))
    taken = slots.take({slot(0)}, 10, timeout=0)[slot(0)]
    assert [e.message for e in taken] == [b"r2", b"r4"]
    assert list(parse_offset(taken[-1].offset)) == ["shardId-b"], "the shard let go is no longer named"


def test_a_shard_detached_without_purge_still_hands_out_what_it_enqueued() -> None:
    slots = queues(0)
    shard = owned("shardId-0")
    slots.enqueue(shard, records(1, 2))
    with slots.lock:
        slots.detach(shard, purge=False)
    assert [e.message for e in slots.take({slot(0)}, 10, timeout=0)[slot(0)]] == [b"r1", b"r2"]


def test_take_waits_for_a_batch_and_returns_it_as_soon_as_a_reader_enqueues() -> None:
    slots = queues(0)
    thread, result = in_thread(lambda: slots.take({slot(0)}, 10, timeout=30))
    slots.enqueue(owned("shardId-0"), records(1))
    thread.join(5)
    assert [e.message for e in result[0][slot(0)]] == [b"r1"]


def test_a_reported_failure_is_raised_by_the_next_take_even_with_records_queued() -> None:
    slots = queues(0)
    slots.enqueue(owned("shardId-0"), records(1))
    failure = KinesisReadError(SYSTEM, "GetRecords failed")
    slots.fail(failure)
    slots.fail(KinesisReadError(SYSTEM, "a later failure"))
    with pytest.raises(KinesisReadError) as raised:
        slots.take({slot(0)}, 10, timeout=0)
    assert raised.value is failure, "the first failure reported wins"


def test_take_refuses_an_ssp_that_is_not_a_slot() -> None:
    with pytest.raises(KinesisSystemError, match="was not registered"):
        queues(0).take({slot(1)}, 10, timeout=0)

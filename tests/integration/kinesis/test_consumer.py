"""The Kinesis consumer against kinesalite: reading, checkpoints, resharding, leases, throttling, startpoints.

Each test stands in for the engine with a ``CheckpointingDriver``: it polls, and "commits" by making
the last polled offset of each slot what the consumer sees as the task checkpoint.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from millstream.connectors.kinesis.errors import KinesisOffsetError, KinesisReadError, KinesisSystemError
from millstream.connectors.kinesis.offsets import parse_offset
from millstream.contracts.startpoints import (
    StartpointOldest,
    StartpointSpecific,
    StartpointTimestamp,
    StartpointUpcoming,
)
from millstream.contracts.systems import StreamSpec
from millstream.model import SystemStreamPartition
from tests.integration.kinesis.helpers import (
    SYSTEM,
    CheckpointingDriver,
    create_stream,
    kinesis_config,
    make_consumer,
    put,
    shard_and_sequence,
    started_admin,
    wait_for,
    wait_for_reads,
)

pytestmark = pytest.mark.integration


def slots(stream: str, partitions: range | list[int]) -> set[SystemStreamPartition]:
    return {SystemStreamPartition(SYSTEM, stream, p) for p in partitions}


def start(config, stream: str, partitions, driver: CheckpointingDriver, offset: str = "TRIM_HORIZON"):
    consumer = make_consumer(config, driver.committed_offsets)
    for ssp in sorted(slots(stream, partitions)):
        consumer.register(ssp, offset)
    consumer.start()
    return consumer


@pytest.fixture
def config(kinesis_endpoint, tmp_path):
    return kinesis_config(kinesis_endpoint, tmp_path, systems__kinesis__consumer__initial__position="TRIM_HORIZON")


def records(n: int, prefix: str = "v", keys: int = 5) -> list[tuple[str, bytes]]:
    return [(f"k{i % keys}", f"{prefix}{i}".encode()) for i in range(n)]


def test_reads_every_shard_in_sequence_order_with_key_headers_arrival_time_and_single_shard_offsets(
    config, kinesis_endpoint, stream_name
):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 2)
    before = int(time.time() * 1000)
    written = put(kinesis_endpoint, stream, records(40))
    driver = CheckpointingDriver()
    consumer = start(config, stream, range(2), driver)
    try:
        driver.run_until(consumer, slots(stream, range(2)), lambda: len(driver.envelopes) >= 40)
    finally:
        consumer.stop()
    assert sorted(driver.payloads()) == sorted(data for _, data in records(40))
    by_shard: dict[str, list[int]] = {}
    for envelope in driver.envelopes:
        shard, sequence = shard_and_sequence(envelope)
        by_shard.setdefault(shard, []).append(int(sequence))
        assert parse_offset(envelope.offset)[shard].sequence_number == sequence
        assert "," not in envelope.offset, "one shard per slot"
        assert envelope.key.decode() == f"k{int(envelope.message[1:]) % 5}"
        assert envelope.timestamp >= before - 1000 and envelope.size == len(envelope.message)
    assert all(seqs == sorted(seqs) for seqs in by_shard.values())
    assert {w["ShardId"] for w in written} == set(by_shard)
    assert sorted(consumer.slot_mapping()) == sorted(slots(stream, range(2)))


def test_initial_position_latest_reads_only_records_that_arrive_after_the_shards_are_opened(
    kinesis_endpoint, tmp_path, stream_name
):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 2)
    put(kinesis_endpoint, stream, records(10, "old"))
    config = kinesis_config(kinesis_endpoint, tmp_path, systems__kinesis__consumer__initial__position="LATEST")
    driver = CheckpointingDriver()
    consumer = start(config, stream, range(2), driver, offset="LATEST")
    try:
        wait_for(lambda: consumer.metrics.get_records_calls >= 2 and len(consumer.owned_shards()[stream]) == 2)
        put(kinesis_endpoint, stream, records(10, "new"))
        driver.run_until(consumer, slots(stream, range(2)), lambda: len(driver.envelopes) >= 10)
        wait_for_reads(consumer, 4)
        driver.poll(consumer, slots(stream, range(2)))
    finally:
        consumer.stop()
    assert sorted(driver.payloads()) == sorted(data for _, data in records(10, "new"))


def test_initial_position_at_timestamp_reads_from_that_instant(kinesis_endpoint, tmp_path, stream_name):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 1)
    put(kinesis_endpoint, stream, records(5, "early"))
    time.sleep(0.05)
    instant = int(time.time() * 1000)
    time.sleep(0.05)
    put(kinesis_endpoint, stream, records(5, "late"))
    config = kinesis_config(
        kinesis_endpoint,
        tmp_path,
        systems__kinesis__consumer__initial__position="AT_TIMESTAMP",
        systems__kinesis__consumer__initial__timestamp=str(instant),
    )
    driver = CheckpointingDriver()
    consumer = start(config, stream, [0], driver)
    try:
        driver.run_until(consumer, slots(stream, [0]), lambda: len(driver.envelopes) >= 5)
    finally:
        consumer.stop()
    assert driver.payloads() == [data for _, data in records(5, "late")]


def test_a_new_consumer_resumes_after_what_was_checkpointed_and_rereads_only_the_uncommitted(
    config, kinesis_endpoint, stream_name
):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 1)
    put(kinesis_endpoint, stream, records(20))
    driver = CheckpointingDriver()
    consumer = start(config, stream, [0], driver)
    try:
        driver.run_until(consumer, slots(stream, [0]), lambda: len(driver.envelopes) >= 20)
        driver.committed = {next(iter(slots(stream, [0]))): driver.envelopes[11].offset}  # processed 0..11 only
    finally:
        consumer.stop()
    put(kinesis_endpoint, stream, records(5, "more"))
    second = CheckpointingDriver()
    consumer = start(config, stream, [0], second)
    try:
        second.run_until(consumer, slots(stream, [0]), lambda: len(second.envelopes) >= 13)
        wait_for_reads(consumer, 2)
        second.poll(consumer, slots(stream, [0]))
    finally:
        consumer.stop()
    assert second.payloads() == [data for _, data in records(20)[12:]] + [data for _, data in records(5, "more")]


def test_a_split_shard_s_children_wait_until_its_last_record_is_checkpointed_then_share_the_only_slot(
    config, kinesis_endpoint, stream_name
):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 1)
    put(kinesis_endpoint, stream, records(10, "parent"))
    admin = started_admin(config)
    admin.split_shard(stream, "shardId-000000000000")
    put(kinesis_endpoint, stream, records(30, "child"))
    ssps = slots(stream, [0])
    driver = CheckpointingDriver()
    consumer = start(config, stream, [0], driver)
    try:
        wait_for(lambda: driver.poll(consumer, ssps) or len(driver.envelopes) >= 10)
        driver.run_until(consumer, ssps, lambda: len(driver.envelopes) >= 10, commit_every=3600)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # the parent's end is not checkpointed: no child record
            driver.poll(consumer, ssps)
        assert driver.payloads() == [data for _, data in records(10, "parent")]
        driver.commit()
        driver.run_until(consumer, ssps, lambda: len(driver.envelopes) >= 40)
        (mapped,) = consumer.slot_mapping().values()
        assert sorted(mapped) == ["shardId-000000000001", "shardId-000000000002"]
    finally:
        consumer.stop()
    children = driver.envelopes[10:]
    assert sorted(e.message for e in children) == sorted(data for _, data in records(30, "child"))
    shared = [e.offset for e in children if "," in e.offset]
    assert shared and all(set(parse_offset(o)) == {"shardId-000000000001", "shardId-000000000002"} for o in shared)
    for key in {k for k, _ in records(30)}:
        mine = [int(e.message[5:]) for e in children if e.key == key.encode()]
        assert mine == sorted(mine), f"key {key} in order across the split"


def test_a_merged_shard_is_read_after_both_parents_finished(config, kinesis_endpoint, stream_name):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 2)
    put(kinesis_endpoint, stream, records(20, "parent"))
    started_admin(config).merge_shards(stream, "shardId-000000000000", "shardId-000000000001")
    put(kinesis_endpoint, stream, records(10, "child"))
    driver = CheckpointingDriver()
    consumer = start(config, stream, range(2), driver)
    try:
        driver.run_until(consumer, slots(stream, range(2)), lambda: len(driver.envelopes) >= 30)
    finally:
        consumer.stop()
    shards = [shard_and_sequence(e)[0] for e in driver.envelopes]
    assert shards.index("shardId-000000000002") == 20, "every parent record came before the first child record"
    assert set(shards[20:]) == {"shardId-000000000002"}


def test_two_consumers_share_the_shards_and_the_survivor_takes_over_what_a_stopping_one_hands_back(
    config, kinesis_endpoint, stream_name
):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 4)
    put(kinesis_endpoint, stream, records(40))
    first, second = CheckpointingDriver(), CheckpointingDriver()
    a = start(config, stream, range(0, 4), first)
    b = start(config, stream, range(4, 8), second)
    both = [(a, first, slots(stream, range(0, 4))), (b, second, slots(stream, range(4, 8)))]

    def pump() -> bool:
        """False, so that ``pump() or condition`` pumps, then tests the condition."""
        for consumer, driver, ssps in both:
            driver.poll(consumer, ssps, 0.01)
            driver.commit()
        return False

    try:
        wait_for(lambda: pump() or [len(c.owned_shards()[stream]) for c, _, _ in both] == [2, 2], 30)
        b.stop()
        both.pop()
        wait_for(lambda: pump() or len(a.owned_shards()[stream]) == 4, 30)
        c_driver = CheckpointingDriver()
        c = start(config, stream, range(8, 12), c_driver)
        both.append((c, c_driver, slots(stream, range(8, 12))))
        wait_for(lambda: pump() or [len(x.owned_shards()[stream]) for x, _, _ in both] == [2, 2], 30)
        wait_for(lambda: pump() or len(first.envelopes) + len(second.envelopes) + len(c_driver.envelopes) >= 40, 30)
        assert a.metrics.leases_shed >= 1
    finally:
        for consumer, _, _ in both:
            consumer.stop()
    everything = first.payloads() + second.payloads() + c_driver.payloads()
    assert set(everything) == {data for _, data in records(40)}
    assert len(everything) == 40, "graceful hand-overs re-deliver nothing"


def test_a_dead_consumer_s_leases_are_taken_over_after_the_lease_duration(config, kinesis_endpoint, stream_name):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 2)
    alive, dead = CheckpointingDriver(), CheckpointingDriver()
    a = start(config, stream, range(0, 2), alive)
    b = start(config, stream, range(2, 4), dead)
    try:
        wait_for(lambda: [len(c.owned_shards()[stream]) for c in (a, b)] == [1, 1], 30)
        b._stopping.set()  # its coordinator stops renewing, as if the process froze
        started = time.monotonic()
        wait_for(lambda: len(a.owned_shards()[stream]) == 2, 30)
        assert time.monotonic() - started >= 1.0, "not before the lease expired (2 s lease)"
        assert a.metrics.leases_stolen == 1
        put(kinesis_endpoint, stream, records(10))
        alive.run_until(a, slots(stream, range(0, 2)), lambda: len(alive.envelopes) >= 10)
    finally:
        a.stop()
        b.stop()


def test_throttled_and_expired_reads_back_off_retry_and_lose_nothing(
    config, kinesis_endpoint, stream_name, monkeypatch
):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 1)
    put(kinesis_endpoint, stream, records(30))
    driver = CheckpointingDriver()
    consumer = make_consumer(config, driver.committed_offsets)
    client = consumer.clients.client
    real = client.get_records
    calls: list[int] = []

    def flaky(**arguments: Any) -> Any:
        calls.append(1)
        if len(calls) in (1, 2):
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException"}}, "GetRecords")
        if len(calls) == 4:
            raise ClientError({"Error": {"Code": "ExpiredIteratorException"}}, "GetRecords")
        return real(**{**arguments, "Limit": 10})

    monkeypatch.setattr(client, "get_records", flaky)
    consumer.register(next(iter(slots(stream, [0]))), "TRIM_HORIZON")
    consumer.start()
    try:
        driver.run_until(consumer, slots(stream, [0]), lambda: len(driver.envelopes) >= 30)
        wait_for_reads(consumer, 2)
        driver.poll(consumer, slots(stream, [0]))
        measured = {
            (name, kind, tuple(sorted(labels.items()))): value for name, kind, labels, value in consumer.measurements()
        }
    finally:
        consumer.stop()
    assert driver.payloads() == [data for _, data in records(30)], "no loss, no duplicate"
    metrics = consumer.metrics.snapshot()
    assert metrics["throttled_by_operation"] == {"GetRecords": 2}
    assert metrics["expired_iterators"] == 1
    # what the container's metrics read: leases held, lag behind the shard's tip, throttled calls
    (shard,) = consumer.metrics.behind_latest()
    assert measured.pop(("kinesis_shard_leases", "gauge", (("stream", stream), ("system", SYSTEM)))) == 1
    assert measured.pop(("kinesis_throttled_calls", "counter", (("operation", "GetRecords"), ("system", SYSTEM)))) == 2
    labels = (("shard", shard[1]), ("stream", stream), ("system", SYSTEM))
    assert measured.pop(("kinesis_lag_seconds", "gauge", labels)) >= 0
    assert measured == {}


def test_each_shard_reader_stays_under_its_getrecords_calls_per_second(kinesis_endpoint, tmp_path, stream_name):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 1)
    config = kinesis_config(
        kinesis_endpoint,
        tmp_path,
        systems__kinesis__consumer__shard__getrecords__per__second="5",
        systems__kinesis__consumer__idle__ms="0",
    )
    driver = CheckpointingDriver()
    consumer = start(config, stream, [0], driver, "LATEST")
    try:
        wait_for(lambda: consumer.metrics.get_records_calls >= 1)
        started, calls = time.monotonic(), consumer.metrics.get_records_calls
        time.sleep(1.5)
        elapsed, made = time.monotonic() - started, consumer.metrics.get_records_calls - calls
    finally:
        consumer.stop()
    assert made <= 5 * elapsed + 1
    assert consumer.metrics.limited_waits >= 1, "the limiter, not idling, spaced the calls"


def test_a_read_kinesis_refuses_for_good_fails_the_next_poll_naming_stream_and_shard(
    config, kinesis_endpoint, stream_name, monkeypatch
):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 1)
    driver = CheckpointingDriver()
    consumer = make_consumer(config, driver.committed_offsets)

    def denied(**arguments: Any) -> Any:
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "GetRecords")

    monkeypatch.setattr(consumer.clients.client, "get_records", denied)
    consumer.register(next(iter(slots(stream, [0]))), "TRIM_HORIZON")
    consumer.start()
    try:
        with pytest.raises(KinesisReadError, match=rf"stream '{stream}' shard 'shardId-000000000000'.*AccessDenied"):
            wait_for(lambda: consumer.poll(slots(stream, [0]), 0.1) and False, 10)
    finally:
        consumer.stop()


def test_startpoints_of_every_type_reposition_the_shards_once(config, kinesis_endpoint, stream_name):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 1)
    ssps = slots(stream, [0])
    early = put(kinesis_endpoint, stream, records(5, "a"))
    time.sleep(0.05)
    instant = int(time.time() * 1000)
    time.sleep(0.05)
    late = put(kinesis_endpoint, stream, records(5, "b"))
    admin = started_admin(config)
    slot = next(iter(ssps))

    def read(offset: str, want: int, then: Any = None) -> list[bytes]:
        driver = CheckpointingDriver()
        consumer = start(config, stream, [0], driver, offset)
        try:
            if then is not None:
                then(consumer)
            driver.run_until(consumer, ssps, lambda: len(driver.envelopes) >= want)
            end = time.monotonic() + 0.5
            while time.monotonic() < end:
                driver.poll(consumer, ssps)
                driver.commit()
        finally:
            consumer.stop()
        return driver.payloads()

    everything = [data for _, data in records(5, "a") + records(5, "b")]
    assert read("TRIM_HORIZON", 10) == everything
    assert read("TRIM_HORIZON", 0) == [], "resumed after the checkpoint"
    oldest = admin.resolve_startpoint(slot, StartpointOldest())
    assert read(oldest, 10) == everything
    assert read(oldest, 0) == [], "a startpoint applies once"
    assert read(admin.resolve_startpoint(slot, StartpointTimestamp(instant)), 5) == everything[5:]
    specific = f"shardId-000000000000:{late[2]['SequenceNumber']}"
    assert read(admin.resolve_startpoint(slot, StartpointSpecific(specific)), 3) == everything[7:]
    assert early[0]["ShardId"] == "shardId-000000000000"

    def produce_when_open(consumer: Any) -> None:
        wait_for(lambda: consumer.metrics.get_records_calls >= 1)
        put(kinesis_endpoint, stream, records(2, "c"))

    upcoming = admin.resolve_startpoint(slot, StartpointUpcoming())
    assert read(upcoming, 2, produce_when_open) == [b"c0", b"c1"]


def test_misuse_is_refused_with_the_slot_or_offset_named(config, kinesis_endpoint, stream_name):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 1)
    consumer = make_consumer(config, CheckpointingDriver().committed_offsets)
    ssp = next(iter(slots(stream, [0])))
    with pytest.raises(KinesisOffsetError, match="'42' is not a Kinesis offset"):
        consumer.register(ssp, "42")
    with pytest.raises(KinesisSystemError, match="cannot read"):
        consumer.register(SystemStreamPartition("log", stream, 0), "TRIM_HORIZON")
    consumer.register(ssp, "TRIM_HORIZON")
    consumer.start()
    try:
        with pytest.raises(KinesisSystemError, match="after the consumer started"):
            consumer.register(SystemStreamPartition(SYSTEM, stream, 1), "TRIM_HORIZON")
        with pytest.raises(KinesisSystemError, match="was not registered"):
            consumer.poll({SystemStreamPartition(SYSTEM, stream, 5)}, 0)
    finally:
        consumer.stop()


def test_a_deleted_and_recreated_stream_is_read_from_its_start_despite_the_old_leases(
    config, kinesis_endpoint, stream_name
):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 1)
    put(kinesis_endpoint, stream, records(5, "old"))
    first = CheckpointingDriver()
    consumer = start(config, stream, [0], first)
    try:
        first.run_until(consumer, slots(stream, [0]), lambda: len(first.envelopes) >= 5)
        first.commit()  # consumer.stop() copies it to the lease table
    finally:
        consumer.stop()
    admin = started_admin(config)
    admin.clear_stream(StreamSpec(SYSTEM, stream))
    time.sleep(1.1)  # kinesalite derives sequence numbers from the creation second: a new second, new numbers
    create_stream(kinesis_endpoint, stream, 1)
    put(kinesis_endpoint, stream, records(3, "new"))
    second = CheckpointingDriver()
    consumer = start(config, stream, [0], second)
    try:
        second.run_until(consumer, slots(stream, [0]), lambda: len(second.envelopes) >= 3)
    finally:
        consumer.stop()
    assert second.payloads() == [b"new0", b"new1", b"new2"]

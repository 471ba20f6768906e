"""The log's SystemConsumer: inclusive start offsets, batches, waiting, end-of-stream and trimmed reads."""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.contracts.systems import OffsetOutOfRangeError, StreamSpec
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.consumer import QUIET_RECHECK_MS, LogSystemConsumer
from millstream.embedded.log.errors import (
    InvalidOffsetError,
    LogOffsetOutOfRangeError,
    LogStorageError,
    LogSystemError,
)
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.log.layout import LogLayout
from millstream.embedded.log.producer import LogSystemProducer
from millstream.errors import StreamNotFoundError
from millstream.model import END_OF_STREAM_OFFSET, IncomingMessageEnvelope

from .conftest import SYSTEM, create, envelope, log_config, read_all, ssp, write


def messages(envelopes: list[IncomingMessageEnvelope]) -> list[bytes]:
    return [e.message for e in envelopes]


@pytest.fixture
def events(admin: LogSystemAdmin, producer: LogSystemProducer) -> list[bytes]:
    """Stream ``events`` with one partition holding five values."""
    create(admin, "events")
    values = [b"v0", b"v1", b"v2", b"v3", b"v4"]
    write(producer, "events", values)
    return values


def test_register_starts_reading_at_the_given_offset_inclusive(
    events: list[bytes], consumer: LogSystemConsumer
) -> None:
    consumer.register(ssp("events"), "2")
    consumer.start()
    envelopes = read_all(consumer, {ssp("events")})
    assert [(e.offset, e.message) for e in envelopes] == [("2", b"v2"), ("3", b"v3"), ("4", b"v4")]


def test_envelopes_carry_offset_key_value_timestamp_headers_and_size(
    admin: LogSystemAdmin, producer: LogSystemProducer, consumer: LogSystemConsumer
) -> None:
    create(admin, "events")
    producer.send("t", envelope("events", b"hello", b"k", timestamp=1234, headers={"trace": b"\x01"}))
    producer.flush("t")
    consumer.register(ssp("events"), "0")
    consumer.start()
    [received] = read_all(consumer, {ssp("events")})
    assert received.ssp == ssp("events")
    assert (received.offset, received.key, received.message) == ("0", b"k", b"hello")
    assert (received.timestamp, received.headers, received.size) == (1234, {"trace": b"\x01"}, 5)


def test_a_record_without_value_or_headers_reads_back_as_none_with_size_zero(
    admin: LogSystemAdmin, producer: LogSystemProducer, consumer: LogSystemConsumer
) -> None:
    create(admin, "events")
    producer.send("t", envelope("events", None, b"k"))
    producer.flush("t")
    consumer.register(ssp("events"), "0")
    consumer.start()
    [tombstone] = read_all(consumer, {ssp("events")})
    assert (tombstone.key, tombstone.message, tombstone.headers, tombstone.size) == (b"k", None, None, 0)


def test_poll_returns_at_most_the_batch_size_per_partition(root: Path, events: list[bytes]) -> None:
    consumer = LogSystemFactory().get_consumer(SYSTEM, log_config(root, poll__batch__size=2))
    consumer.register(ssp("events"), "0")
    consumer.start()
    batches = [consumer.poll({ssp("events")}, 0)[ssp("events")] for _ in range(3)]
    assert [messages(batch) for batch in batches] == [[b"v0", b"v1"], [b"v2", b"v3"], [b"v4"]]
    consumer.stop()


def test_poll_leaves_out_partitions_without_data(
    admin: LogSystemAdmin, producer: LogSystemProducer, consumer: LogSystemConsumer
) -> None:
    create(admin, "events", 2)
    write(producer, "events", [b"a"], partition=1)
    consumer.register(ssp("events", 0), "0")
    consumer.register(ssp("events", 1), "0")
    consumer.start()
    assert set(consumer.poll({ssp("events", 0), ssp("events", 1)}, 0)) == {ssp("events", 1)}


def test_poll_reads_only_the_partitions_it_is_asked_for(
    admin: LogSystemAdmin, producer: LogSystemProducer, consumer: LogSystemConsumer
) -> None:
    create(admin, "events", 2)
    write(producer, "events", [b"a"], partition=0)
    write(producer, "events", [b"b"], partition=1)
    consumer.register(ssp("events", 0), "0")
    consumer.register(ssp("events", 1), "0")
    consumer.start()
    assert set(consumer.poll({ssp("events", 1)}, 0)) == {ssp("events", 1)}
    assert messages(consumer.poll({ssp("events", 0), ssp("events", 1)}, 0)[ssp("events", 0)]) == [b"a"]


def test_poll_continues_where_the_previous_poll_stopped_as_records_arrive(
    events: list[bytes], producer: LogSystemProducer, consumer: LogSystemConsumer
) -> None:
    consumer.register(ssp("events"), "0")
    consumer.start()
    assert messages(read_all(consumer, {ssp("events")})) == events
    write(producer, "events", [b"v5"])
    assert [(e.offset, e.message) for e in read_all(consumer, {ssp("events")})] == [("5", b"v5")]


def test_poll_waits_up_to_the_timeout_when_there_is_nothing(admin: LogSystemAdmin, consumer: LogSystemConsumer) -> None:
    create(admin, "events")
    consumer.register(ssp("events"), "0")
    consumer.start()
    started = time.monotonic()
    assert consumer.poll({ssp("events")}, 0.15) == {}
    assert time.monotonic() - started >= 0.14  # it waited; how much longer a loaded machine takes is not asserted


POLL_TIMEOUT = 60.0
"""Far longer than the record takes to arrive, so a poll that returns before it returned on the record."""


def test_poll_returns_as_soon_as_data_arrives_while_waiting(
    admin: LogSystemAdmin, config: object, consumer: LogSystemConsumer
) -> None:
    create(admin, "events")
    consumer.register(ssp("events"), "0")
    consumer.start()

    def produce_later() -> None:
        time.sleep(0.1)
        producer = LogSystemFactory().get_producer(SYSTEM, config)  # type: ignore[arg-type]
        write(producer, "events", [b"late"])
        producer.stop()

    thread = threading.Thread(target=produce_later)
    started = time.monotonic()
    thread.start()
    result = consumer.poll({ssp("events")}, POLL_TIMEOUT)
    elapsed = time.monotonic() - started
    thread.join()
    assert messages(result[ssp("events")]) == [b"late"]
    assert elapsed < POLL_TIMEOUT, "the poll returned when the record arrived, not at its timeout"


def test_a_sealed_partition_yields_end_of_stream_once_after_its_last_record(
    events: list[bytes], admin: LogSystemAdmin, consumer: LogSystemConsumer
) -> None:
    admin.seal_stream("events")
    consumer.register(ssp("events"), "3")
    consumer.start()
    received = read_all(consumer, {ssp("events")})
    assert [e.offset for e in received] == ["3", "4", END_OF_STREAM_OFFSET]
    assert received[-1].is_end_of_stream and received[-1].ssp == ssp("events")
    assert consumer.poll({ssp("events")}, 0.02) == {}


def test_an_unsealed_partition_read_to_its_end_yields_no_end_of_stream(
    events: list[bytes], consumer: LogSystemConsumer
) -> None:
    consumer.register(ssp("events"), "0")
    consumer.start()
    assert not any(e.is_end_of_stream for e in read_all(consumer, {ssp("events")}))


def test_an_empty_sealed_partition_yields_only_end_of_stream(
    admin: LogSystemAdmin, consumer: LogSystemConsumer
) -> None:
    create(admin, "events")
    admin.seal_stream("events")
    consumer.register(ssp("events"), "0")
    consumer.start()
    assert [e.is_end_of_stream for e in read_all(consumer, {ssp("events")})] == [True]


def test_register_below_the_oldest_retained_offset_raises_naming_both_offsets(
    events: list[bytes], admin: LogSystemAdmin, consumer: LogSystemConsumer
) -> None:
    admin.trim(ssp("events"), "3")
    with pytest.raises(OffsetOutOfRangeError, match=r"'events' partition 0: offset 1 was trimmed.*oldest.* 3"):
        consumer.register(ssp("events"), "1")


def test_register_beyond_the_upcoming_offset_raises(events: list[bytes], consumer: LogSystemConsumer) -> None:
    with pytest.raises(LogOffsetOutOfRangeError, match=r"offset 9 is beyond the end of the log.*upcoming offset is 5"):
        consumer.register(ssp("events"), "9")


def test_register_at_the_upcoming_offset_reads_only_new_records(
    events: list[bytes], producer: LogSystemProducer, consumer: LogSystemConsumer
) -> None:
    consumer.register(ssp("events"), "5")
    consumer.start()
    assert read_all(consumer, {ssp("events")}) == []
    write(producer, "events", [b"new"])
    assert messages(read_all(consumer, {ssp("events")})) == [b"new"]


def test_registering_a_partition_twice_keeps_the_earlier_offset(
    events: list[bytes], consumer: LogSystemConsumer
) -> None:
    consumer.register(ssp("events"), "3")
    consumer.register(ssp("events"), "1")
    consumer.register(ssp("events"), "4")
    consumer.start()
    assert messages(read_all(consumer, {ssp("events")})) == [b"v1", b"v2", b"v3", b"v4"]


def test_register_rejects_an_offset_that_is_not_an_integer(events: list[bytes], consumer: LogSystemConsumer) -> None:
    with pytest.raises(InvalidOffsetError, match=r"'events' partition 0: offset 'abc'"):
        consumer.register(ssp("events"), "abc")


def test_register_of_a_missing_stream_raises_stream_not_found(consumer: LogSystemConsumer) -> None:
    with pytest.raises(StreamNotFoundError, match=r"'log.missing'"):
        consumer.register(ssp("missing"), "0")


def test_register_of_a_partition_beyond_the_streams_count_names_it(
    admin: LogSystemAdmin, consumer: LogSystemConsumer
) -> None:
    create(admin, "events", 2)
    with pytest.raises(LogSystemError, match=r"'events' has partitions 0..1; cannot read partition 2"):
        consumer.register(ssp("events", 2), "0")


def test_register_of_another_systems_partition_is_refused(consumer: LogSystemConsumer) -> None:
    with pytest.raises(LogSystemError, match=r"consumer of system 'log' cannot read"):
        consumer.register(ssp("events")._replace(system="kafka"), "0")


def test_register_after_start_is_refused(events: list[bytes], consumer: LogSystemConsumer) -> None:
    consumer.start()
    with pytest.raises(LogSystemError, match=r"after the consumer"):
        consumer.register(ssp("events"), "0")


def test_poll_of_an_unregistered_partition_is_refused(events: list[bytes], consumer: LogSystemConsumer) -> None:
    consumer.start()
    with pytest.raises(LogSystemError, match=r"was not registered"):
        consumer.poll({ssp("events")}, 0)


def test_poll_raises_when_retention_trims_past_the_read_position(
    events: list[bytes], admin: LogSystemAdmin, root: Path
) -> None:
    consumer = LogSystemFactory().get_consumer(SYSTEM, log_config(root, poll__batch__size=2))
    consumer.register(ssp("events"), "0")
    consumer.start()
    assert messages(consumer.poll({ssp("events")}, 0)[ssp("events")]) == [b"v0", b"v1"]
    admin.trim(ssp("events"), "4")
    with pytest.raises(OffsetOutOfRangeError, match=r"offset 2 was trimmed; the oldest available offset is 4"):
        consumer.poll({ssp("events")}, 0)
    consumer.stop()


def test_trimming_behind_the_read_position_does_not_disturb_the_reader(
    events: list[bytes], admin: LogSystemAdmin, root: Path
) -> None:
    consumer = LogSystemFactory().get_consumer(SYSTEM, log_config(root, poll__batch__size=2))
    consumer.register(ssp("events"), "0")
    consumer.start()
    consumer.poll({ssp("events")}, 0)
    admin.trim(ssp("events"), "2")
    assert messages(read_all(consumer, {ssp("events")})) == [b"v2", b"v3", b"v4"]
    consumer.stop()


def test_a_reader_of_a_stream_that_was_re_created_fails_rather_than_waiting_forever(
    events: list[bytes], admin: LogSystemAdmin, root: Path
) -> None:
    """The partition read to its end is quiet: the replaced file is found by its next full inspection, at most
    ``QUIET_RECHECK_MS`` on the consumer's clock later (nothing commits to the old file to wake it sooner)."""
    now = [0]
    consumer = LogSystemConsumer(SYSTEM, LogLayout(root), clock=lambda: now[0])
    consumer.register(ssp("events"), "0")
    consumer.start()
    try:
        assert messages(read_all(consumer, {ssp("events")})) == events
        admin.clear_stream(StreamSpec(SYSTEM, "events"))
        create(admin, "events")
        now[0] += QUIET_RECHECK_MS
        with pytest.raises(LogStorageError, match="deleted or replaced"):
            consumer.poll({ssp("events")}, 0)
    finally:
        consumer.stop()


operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(min_value=1, max_value=7)),
        st.tuples(st.just("trim"), st.integers(min_value=0, max_value=30)),
    ),
    max_size=12,
)


@settings(max_examples=25, deadline=None)
@given(operations, st.integers(min_value=1, max_value=4))
def test_a_read_from_any_retained_offset_returns_exactly_the_records_appended_from_there(
    steps: list[tuple[str, int]], batch_size: int
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        config = log_config(Path(directory), poll__batch__size=batch_size)
        factory = LogSystemFactory()
        admin = factory.get_admin(SYSTEM, config)
        producer = factory.get_producer(SYSTEM, config)
        create(admin, "events")
        appended: list[bytes] = []
        oldest = 0
        for kind, number in steps:
            if kind == "append":
                batch = [f"m{len(appended) + i}".encode() for i in range(number)]
                write(producer, "events", batch)
                appended.extend(batch)
            else:
                oldest = int(admin.trim(ssp("events"), str(number)))
            metadata = admin.get_ssp_metadata([ssp("events")])[ssp("events")]
            assert int(metadata.upcoming_offset) == len(appended)
            assert oldest <= len(appended)
        producer.stop()
        for start in range(oldest, len(appended) + 1):
            consumer = factory.get_consumer(SYSTEM, config)
            consumer.register(ssp("events"), str(start))
            consumer.start()
            received = read_all(consumer, {ssp("events")})
            consumer.stop()
            assert [e.offset for e in received] == [str(offset) for offset in range(start, len(appended))]
            assert messages(received) == appended[start:]


record = st.tuples(
    st.none() | st.binary(min_size=1, max_size=3),
    st.none() | st.binary(max_size=4),
    st.integers(min_value=0, max_value=1_000),
    st.none() | st.dictionaries(st.sampled_from(["a", "b"]), st.binary(max_size=2), min_size=1, max_size=2),
)
mixed_steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(min_value=1, max_value=5), st.lists(record, min_size=1, max_size=9)),
        st.tuples(st.just("trim"), st.integers(min_value=0, max_value=40), st.just([])),
    ),
    max_size=8,
)


@settings(max_examples=25, deadline=None)
@given(mixed_steps, st.integers(min_value=1, max_value=6))
def test_envelopes_match_what_was_sent_from_any_start_across_mixed_batches_and_trims_inside_them(
    steps: list[tuple[str, int, list[tuple[bytes | None, bytes | None, int, dict[str, bytes] | None]]]],
    poll_size: int,
) -> None:
    """Producer batch sizes vary per step, so reads start, end and get trimmed inside batches."""
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        factory = LogSystemFactory()
        admin = factory.get_admin(SYSTEM, log_config(root))
        create(admin, "events")
        sent: list[tuple[bytes | None, bytes | None, int, dict[str, bytes] | None]] = []
        oldest = 0
        for kind, number, records in steps:
            if kind == "append":
                producer = factory.get_producer(SYSTEM, log_config(root, producer__batch__size=number))
                for key, value, timestamp, headers in records:
                    producer.send("t", envelope("events", value, key, timestamp=timestamp, headers=headers))
                producer.stop()
                sent.extend(records)
            else:
                oldest = int(admin.trim(ssp("events"), str(number)))
        config = log_config(root, poll__batch__size=poll_size)
        for start in range(oldest, len(sent) + 1):
            consumer = factory.get_consumer(SYSTEM, config)
            consumer.register(ssp("events"), str(start))
            consumer.start()
            received = read_all(consumer, {ssp("events")})
            consumer.stop()
            assert [e.offset for e in received] == [str(offset) for offset in range(start, len(sent))]
            assert [(e.key, e.message, e.timestamp, e.headers, e.size) for e in received] == [
                (key, value, timestamp, headers, len(value or b"")) for key, value, timestamp, headers in sent[start:]
            ]

"""The Kafka system's admin, consumer and producer against a real broker."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from millstream.composition.systems import system_factory
from millstream.connectors.kafka.errors import (
    KafkaBrokersUnreachableError,
    KafkaClientConfigError,
    KafkaOffsetOutOfRangeError,
    KafkaProduceError,
    KafkaRecordTooLargeError,
    KafkaSystemError,
)
from millstream.connectors.kafka.factory import KafkaSystemFactory
from millstream.connectors.kafka.partitioner import murmur2, partition_for_key
from millstream.connectors.kafka.producer import KafkaSystemProducer
from millstream.contracts.systems import StreamSpec, WriterToken
from millstream.coordinator.prepare import prepare
from millstream.errors import ConfigError, StreamNotFoundError
from millstream.model import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from millstream.systems.producers import SerializedProducer
from tests.helpers import wait_until
from tests.integration.kafka.helpers import SYSTEM, create_topic, kafka_config, produce, read_all
from tests.integration.processes import free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def config(bootstrap):
    return kafka_config(bootstrap)


@pytest.fixture
def admin(config):
    admin = KafkaSystemFactory().get_admin(SYSTEM, config)
    admin.start()
    yield admin
    admin.stop()


def started_producer(config):
    producer = KafkaSystemFactory().get_producer(SYSTEM, config)
    producer.start()
    return producer


def consume(config, offsets: dict[SystemStreamPartition, str], want: int, timeout: float = 30.0):
    """Register ``offsets``, poll until ``want`` envelopes arrived, return them by partition."""
    consumer = KafkaSystemFactory().get_consumer(SYSTEM, config)
    for ssp, offset in offsets.items():
        consumer.register(ssp, offset)
    consumer.start()
    got: dict[SystemStreamPartition, list] = {}
    deadline = time.monotonic() + timeout
    try:
        while sum(map(len, got.values())) < want and time.monotonic() < deadline:
            for ssp, envelopes in consumer.poll(set(offsets), 0.2).items():
                got.setdefault(ssp, []).extend(envelopes)
    finally:
        consumer.stop()
    return got


# --- admin -----------------------------------------------------------------------------------------


def test_factory_is_found_by_alias_and_by_samza_class_name(config):
    assert isinstance(system_factory(config, SYSTEM), KafkaSystemFactory)
    samza = config.with_overrides({"systems.kafka.samza.factory": "org.apache.samza.system.kafka.KafkaSystemFactory"})
    assert isinstance(system_factory(samza, SYSTEM), KafkaSystemFactory)


def test_create_stream_with_partitions_then_metadata_of_an_empty_topic(admin, topic_name):
    topic = topic_name()
    assert admin.create_stream(StreamSpec(SYSTEM, topic, 3)) is True
    assert admin.create_stream(StreamSpec(SYSTEM, topic, 3)) is False
    metadata = admin.get_system_stream_metadata([topic, "no-such-topic"])
    assert set(metadata) == {topic}
    assert metadata[topic].partition_count == 3
    for partition in metadata[topic].partitions.values():
        assert (partition.oldest_offset, partition.newest_offset, partition.upcoming_offset) == (None, None, "0")
        assert partition.sealed is False
    assert topic in admin.list_streams()
    assert not any(name.startswith("__") for name in admin.list_streams())


def test_metadata_reports_oldest_newest_and_upcoming_offsets(admin, bootstrap, topic_name):
    topic = topic_name()
    admin.create_stream(StreamSpec(SYSTEM, topic, 2))
    produce(bootstrap, topic, [(b"k", b"v%d" % i) for i in range(5)], partition=1)
    partitions = admin.get_system_stream_metadata([topic])[topic].partitions
    offsets = {p: (m.oldest_offset, m.newest_offset, m.upcoming_offset) for p, m in partitions.items()}
    assert offsets == {0: (None, None, "0"), 1: ("0", "4", "5")}
    ssp = SystemStreamPartition(SYSTEM, topic, 1)
    assert admin.get_ssp_metadata([ssp])[ssp].upcoming_offset == "5"


def test_offsets_after_and_comparator(admin):
    ssp = SystemStreamPartition(SYSTEM, "t", 0)
    assert admin.offsets_after({ssp: "41"}) == {ssp: "42"}
    assert admin.offset_comparator("9", "10") < 0
    assert admin.offset_comparator("10", "10") == 0
    assert admin.offset_comparator("11", "10") > 0
    assert admin.offset_comparator("x", "10") is None
    with pytest.raises(KafkaSystemError, match=r"'abc' is not a non-negative integer"):
        admin.offsets_after({ssp: "abc"})


def test_offset_for_timestamp_finds_the_first_record_at_or_after_it_and_upcoming_past_the_end(
    admin, bootstrap, topic_name
):
    topic = topic_name()
    admin.create_stream(StreamSpec(SYSTEM, topic, 1))
    for index, timestamp in enumerate((1_000, 2_000, 3_000)):
        produce(bootstrap, topic, [(None, b"%d" % index)], timestamp=timestamp)
    ssp = SystemStreamPartition(SYSTEM, topic, 0)
    assert admin.offset_for_timestamp(ssp, 0) == "0"
    assert admin.offset_for_timestamp(ssp, 1_500) == "1"
    assert admin.offset_for_timestamp(ssp, 3_000) == "2"
    assert admin.offset_for_timestamp(ssp, 10_000) == "3"
    with pytest.raises(StreamNotFoundError, match=r"no-such-topic"):
        admin.offset_for_timestamp(SystemStreamPartition(SYSTEM, "no-such-topic", 0), 0)


def test_create_a_compacted_topic_with_replication_factor_and_validate_it(admin, topic_name):
    topic = topic_name("changelog")
    spec = StreamSpec(SYSTEM, topic, 2, {"cleanup.policy": "compact", "replication.factor": "1"})
    assert admin.create_stream(spec)
    assert admin.topic_config(topic)["cleanup.policy"] == "compact"
    admin.validate_stream(spec)

    plain = topic_name("plain")
    admin.create_stream(StreamSpec(SYSTEM, plain, 2))
    with pytest.raises(KafkaSystemError, match=f"'{plain}' has cleanup.policy='delete'"):
        admin.validate_stream(StreamSpec(SYSTEM, plain, 2, {"cleanup.policy": "compact"}))
    with pytest.raises(Exception, match=r"has 2 partitions, expected 3"):
        admin.validate_stream(StreamSpec(SYSTEM, plain, 3))
    with pytest.raises(StreamNotFoundError, match=r"kafka.no-such-topic"):
        admin.validate_stream(StreamSpec(SYSTEM, "no-such-topic", 1))


def test_an_intermediate_topic_is_created_without_retention_and_one_with_retention_is_refused(admin, topic_name):
    topic = topic_name("by-user")
    spec = StreamSpec(SYSTEM, topic, 2, intermediate=True)
    assert admin.create_stream(spec)
    config = admin.topic_config(topic)
    assert (config["retention.ms"], config["retention.bytes"]) == ("-1", "-1")
    admin.validate_stream(spec)

    limited = topic_name("limited")
    admin.create_stream(StreamSpec(SYSTEM, limited, 2, {"retention.ms": "60000"}))
    with pytest.raises(KafkaSystemError, match=f"'{limited}' is an intermediate stream but has retention.ms=60000"):
        admin.validate_stream(StreamSpec(SYSTEM, limited, 2, intermediate=True))


def test_delete_messages_moves_each_partitions_log_start_to_the_offset(admin, bootstrap, topic_name):
    topic = topic_name()
    create_topic(bootstrap, topic, 2)
    for partition in (0, 1):
        produce(bootstrap, topic, [(None, b"x")] * 5, partition=partition)
    first, second = (SystemStreamPartition(SYSTEM, topic, partition) for partition in (0, 1))
    assert admin.delete_messages({first: "3", second: "5"})
    partitions = admin.get_system_stream_metadata([topic])[topic].partitions
    assert [(p.oldest_offset, p.upcoming_offset) for p in partitions.values()] == [("3", "5"), (None, "5")]


def test_create_stream_with_a_bad_topic_config_names_the_topic(admin, topic_name):
    topic = topic_name()
    with pytest.raises(KafkaSystemError, match=f"cannot create topic '{topic}'"):
        admin.create_stream(StreamSpec(SYSTEM, topic, 1, {"cleanup.policy": "bogus"}))


def test_clear_stream_deletes_the_topic(admin, topic_name):
    topic = topic_name()
    admin.create_stream(StreamSpec(SYSTEM, topic, 1))
    assert admin.clear_stream(StreamSpec(SYSTEM, topic)) is True
    assert admin.get_system_stream_metadata([topic]) == {}
    assert admin.clear_stream(StreamSpec(SYSTEM, topic)) is False
    assert admin.create_stream(StreamSpec(SYSTEM, topic, 2)) is True


# --- consumer --------------------------------------------------------------------------------------


def test_consumer_reads_from_the_registered_offset_with_keys_headers_and_timestamps(config, bootstrap, topic_name):
    topic = topic_name()
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [(b"k%d" % i, b"value-%d" % i) for i in range(3)], timestamp=1_700_000_000_000)
    produce(bootstrap, topic, [(None, None)], headers=[("trace", b"abc"), ("empty", b"")])
    ssp = SystemStreamPartition(SYSTEM, topic, 0)
    envelopes = consume(config, {ssp: "1"}, want=3)[ssp]
    assert [e.offset for e in envelopes] == ["1", "2", "3"]
    assert [(e.key, e.message) for e in envelopes] == [(b"k1", b"value-1"), (b"k2", b"value-2"), (None, None)]
    assert envelopes[0].timestamp == 1_700_000_000_000
    assert envelopes[0].headers is None
    assert envelopes[2].headers == {"trace": b"abc", "empty": b""}
    assert envelopes[0].size == len(b"value-1")
    assert not any(e.is_end_of_stream for e in envelopes)


def test_consumer_of_several_topics_gives_each_partition_its_own_messages_in_order(config, bootstrap, topic_name):
    """Several topics take the consumer's (topic, partition) lookup instead of the partition number alone."""
    topics = [topic_name("a"), topic_name("b")]
    for topic in topics:
        create_topic(bootstrap, topic, 2)
        for partition in range(2):
            produce(
                bootstrap,
                topic,
                [(b"k", b"%s-%d-%d" % (topic.encode(), partition, i)) for i in range(30)],
                partition=partition,
            )
    ssps = [SystemStreamPartition(SYSTEM, topic, partition) for topic in topics for partition in range(2)]
    got = consume(config, {ssp: "0" for ssp in ssps}, want=120)
    for ssp in ssps:
        expected = [b"%s-%d-%d" % (ssp.stream.encode(), ssp.partition, i) for i in range(30)]
        assert [e.message for e in got[ssp]] == expected, ssp
        assert [e.offset for e in got[ssp]] == [str(i) for i in range(30)]
        assert all(e.ssp == ssp and e.size == len(e.message) for e in got[ssp])


def test_consumer_serves_only_the_partitions_asked_for_and_buffers_the_rest(config, bootstrap, topic_name):
    topic = topic_name()
    create_topic(bootstrap, topic, 2)
    for partition in range(2):
        produce(bootstrap, topic, [(None, b"p%d-%d" % (partition, i)) for i in range(50)], partition=partition)
    first, second = (SystemStreamPartition(SYSTEM, topic, p) for p in range(2))
    consumer = KafkaSystemFactory().get_consumer(SYSTEM, config)
    consumer.register(first, "0")
    consumer.register(second, "0")
    consumer.start()
    try:
        only_first: list = []
        deadline = time.monotonic() + 30
        while len(only_first) < 50 and time.monotonic() < deadline:
            batch = consumer.poll({first}, 0.2)
            assert set(batch) <= {first}
            only_first.extend(batch.get(first, []))
        assert [e.message for e in only_first] == [b"p0-%d" % i for i in range(50)]
        rest: list = []
        while len(rest) < 50 and time.monotonic() < deadline:
            rest.extend(consumer.poll({first, second}, 0.2).get(second, []))
        assert [e.message for e in rest] == [b"p1-%d" % i for i in range(50)]
    finally:
        consumer.stop()


def test_consumer_pauses_a_partition_whose_buffer_is_full_and_resumes_it_without_losing_order(
    config, bootstrap, topic_name
):
    topic = topic_name()
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [(None, b"%d" % i) for i in range(500)], partition=1)
    first, second = (SystemStreamPartition(SYSTEM, topic, p) for p in range(2))
    consumer = KafkaSystemFactory().get_consumer(SYSTEM, config)
    consumer.buffer_size = 20
    consumer.batch_size = 50
    consumer.register(first, "0")
    consumer.register(second, "0")
    consumer.start()
    try:
        deadline = time.monotonic() + 30
        while second not in consumer._paused and time.monotonic() < deadline:
            assert consumer.poll({first}, 0.1) == {}
        assert second in consumer._paused
        for _ in range(5):
            consumer.poll({first}, 0.1)
        assert len(consumer._buffers[second]) < 20 + 50, "a paused partition is no longer fetched"
        produce(bootstrap, topic, [(None, b"p0")], partition=0)
        seen_first: list = []
        while not seen_first and time.monotonic() < deadline:
            seen_first.extend(consumer.poll({first}, 0.1).get(first, []))
        assert [e.message for e in seen_first] == [b"p0"]
        seen_second: list = []
        while len(seen_second) < 500 and time.monotonic() < deadline:
            seen_second.extend(consumer.poll({second}, 0.1).get(second, []))
        assert [int(e.message) for e in seen_second] == list(range(500))
        assert [int(e.offset) for e in seen_second] == list(range(500))
        assert second not in consumer._paused
    finally:
        consumer.stop()


def test_consumer_of_a_missing_topic_or_partition_fails_at_start_naming_it(config, bootstrap, topic_name):
    consumer = KafkaSystemFactory().get_consumer(SYSTEM, config)
    consumer.register(SystemStreamPartition(SYSTEM, "no-such-topic", 0), "0")
    with pytest.raises(StreamNotFoundError, match=r"'kafka.no-such-topic' does not exist"):
        consumer.start()
    topic = topic_name()
    create_topic(bootstrap, topic, 1)
    consumer = KafkaSystemFactory().get_consumer(SYSTEM, config)
    consumer.register(SystemStreamPartition(SYSTEM, topic, 3), "0")
    with pytest.raises(KafkaSystemError, match=f"'{topic}' has partitions 0..0; cannot read partition 3"):
        consumer.start()


def test_consumer_at_an_offset_beyond_the_end_fails_naming_topic_and_partition(config, bootstrap, topic_name):
    topic = topic_name()
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [(None, b"x")])
    consumer = KafkaSystemFactory().get_consumer(SYSTEM, config)
    consumer.register(SystemStreamPartition(SYSTEM, topic, 0), "100")
    consumer.start()
    try:
        with pytest.raises(KafkaOffsetOutOfRangeError, match=f"topic '{topic}' partition 0"):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                consumer.poll({SystemStreamPartition(SYSTEM, topic, 0)}, 0.2)
    finally:
        consumer.stop()


# --- producer --------------------------------------------------------------------------------------


def test_murmur2_matches_the_java_client():
    # Kafka's UtilsTest.testMurmur2 vectors.
    vectors = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    assert {key: murmur2(key) for key in vectors} == vectors


def test_keyed_messages_land_where_the_java_default_partitioner_puts_them(config, bootstrap, topic_name):
    topic = topic_name()
    create_topic(bootstrap, topic, 7)
    producer = started_producer(config)
    keys = [f"user-{i}".encode() for i in range(200)]
    for key in keys:
        producer.send("task", OutgoingMessageEnvelope(SystemStream(SYSTEM, topic), key, key))
    producer.flush("task")
    producer.stop()
    placed = {m.key(): m.partition() for m in read_all(bootstrap, topic, 7)}
    assert placed == {key: partition_for_key(key, 7) for key in keys}
    assert len(set(placed.values())) == 7


def test_a_batch_lands_as_sends_one_by_one_would_keyed_in_order_with_refusals_named(config, bootstrap, topic_name):
    """``send_batch`` is ``send``'s hot path once per batch: keyed messages where the Java partitioner puts
    them, each partition's messages in the batch's order, unkeyed ones all delivered, and a message librdkafka
    refuses named as ``send`` names it."""
    topic = topic_name()
    create_topic(bootstrap, topic, 7)
    stream = SystemStream(SYSTEM, topic)
    producer = started_producer(config)
    keys = [f"user-{i % 50}".encode() for i in range(20_000)]  # more than the producer serves per poll
    producer.send_batch("task", stream, [b"%d" % i for i in range(20_000)], keys)
    producer.send_batch("task", stream, [b"unkeyed-%d" % i for i in range(100)], None)
    with pytest.raises(KafkaSystemError, match=f"Kafka topic '{topic}': key and message must be bytes"):
        producer.send_batch("task", stream, [42], None)
    producer.flush("task")
    producer.stop()
    messages = read_all(bootstrap, topic, 7)
    keyed = [m for m in messages if m.key() is not None]
    assert len(keyed) == 20_000
    assert all(m.partition() == partition_for_key(m.key(), 7) for m in keyed)
    for partition in range(7):
        values = [int(m.value()) for m in keyed if m.partition() == partition]
        assert values == sorted(values), "a partition keeps the batch's order"
    unkeyed = [m for m in messages if m.key() is None]
    assert sorted(m.value() for m in unkeyed) == sorted(b"unkeyed-%d" % i for i in range(100))


def test_explicit_partition_and_partition_key_are_honoured(config, bootstrap, topic_name):
    topic = topic_name()
    create_topic(bootstrap, topic, 4)
    stream = SystemStream(SYSTEM, topic)
    producer = started_producer(config)
    producer.send("task", OutgoingMessageEnvelope(stream, b"pinned", b"any-key", partition=3))
    producer.send("task", OutgoingMessageEnvelope(stream, b"by-partition-key", b"key", b"other"))
    producer.send("task", OutgoingMessageEnvelope(stream, b"headers", b"k", timestamp=1234, headers={"h": b"v"}))
    with pytest.raises(KafkaSystemError, match=f"'{topic}' has partitions 0..3; an envelope asked for partition 4"):
        producer.send("task", OutgoingMessageEnvelope(stream, b"x", partition=4))
    producer.flush("task")
    producer.stop()
    messages = {m.value(): m for m in read_all(bootstrap, topic, 4)}
    assert messages[b"pinned"].partition() == 3
    assert messages[b"by-partition-key"].partition() == partition_for_key(b"other", 4)
    assert messages[b"by-partition-key"].key() == b"key"
    assert messages[b"headers"].timestamp()[1] == 1234
    assert messages[b"headers"].headers() == [("h", b"v")]


def test_sending_to_a_missing_topic_fails_naming_it_unless_auto_create_is_on(config, bootstrap, topic_name):
    topic = topic_name()
    producer = started_producer(config)
    with pytest.raises(StreamNotFoundError, match=f"'kafka.{topic}' does not exist.*auto.create.streams"):
        producer.send("task", OutgoingMessageEnvelope(SystemStream(SYSTEM, topic), b"x"))
    producer.stop()

    auto = config.with_overrides({"systems.kafka.auto.create.streams": "true", "systems.kafka.default.partitions": 3})
    producer = started_producer(auto)
    producer.send("task", OutgoingMessageEnvelope(SystemStream(SYSTEM, topic), b"x"))
    producer.flush("task")
    producer.stop()
    admin = KafkaSystemFactory().get_admin(SYSTEM, config)
    assert admin.get_system_stream_metadata([topic])[topic].partition_count == 3


def test_a_record_too_large_for_the_producer_is_refused_at_send_naming_the_topic(config, bootstrap, topic_name):
    topic = topic_name()
    create_topic(bootstrap, topic, 1)
    producer = started_producer(config.with_overrides({"systems.kafka.producer.message.max.bytes": "10000"}))
    with pytest.raises(KafkaRecordTooLargeError, match=f"topic '{topic}'.*20000 bytes"):
        producer.send("task", OutgoingMessageEnvelope(SystemStream(SYSTEM, topic), b"x" * 20_000))
    producer.stop()


@pytest.mark.parametrize("timestamp", [0, -1000])
def test_a_timestamp_kafka_cannot_carry_is_refused_instead_of_becoming_the_current_time(
    config, bootstrap, topic_name, timestamp
):
    topic = topic_name()
    create_topic(bootstrap, topic, 1)
    producer = started_producer(config)
    envelope = OutgoingMessageEnvelope(SystemStream(SYSTEM, topic), b"x", timestamp=timestamp)
    with pytest.raises(KafkaSystemError, match=f"topic '{topic}': cannot write a record with timestamp {timestamp} ms"):
        producer.send("task", envelope)
    producer.send("task", OutgoingMessageEnvelope(SystemStream(SYSTEM, topic), b"y", timestamp=1))
    producer.flush("task")
    producer.stop()
    assert [record.timestamp()[1] for record in read_all(bootstrap, topic, 1)] == [1]


def test_a_delivery_failure_surfaces_at_the_next_flush_naming_topic_and_partition(config, bootstrap, topic_name):
    topic = topic_name()
    create_topic(bootstrap, topic, 1, **{"max.message.bytes": "2000"})
    producer = started_producer(config)
    producer.send("task", OutgoingMessageEnvelope(SystemStream(SYSTEM, topic), b"small"))
    producer.flush("task")
    producer.send("task", OutgoingMessageEnvelope(SystemStream(SYSTEM, topic), b"x" * 5_000))
    with pytest.raises(KafkaRecordTooLargeError, match=f"topic '{topic}' partition 0.*5000 bytes"):
        producer.flush("task")
    producer.flush("task")  # reported once, then cleared
    producer.stop()
    assert [m.value() for m in read_all(bootstrap, topic, 1)] == [b"small"]


def test_a_sources_flush_waits_only_when_that_source_sent_since_the_last_flush(bootstrap, topic_name):
    """Issue 40: a task's commit flushed the whole container's producer. A source that sent nothing since the
    last flush began (that flush covered all it sent) returns at once, leaving the other source's record to
    its linger; a source with records of its own waits (librdkafka flushes no subset: for everything). This is
    the default (``systems.<s>.flush.per.source`` off)."""
    topic = topic_name()
    create_topic(bootstrap, topic, 1)
    producer = started_producer(kafka_config(bootstrap, systems__kafka__producer__linger__ms=60_000))
    stream = SystemStream(SYSTEM, topic)
    assert producer.flush_covers_every_source
    try:
        producer.send("a", OutgoingMessageEnvelope(stream, b"a1"))
        producer.flush("b")
        assert len(producer._producer) == 1, "b's flush waited for a's record"
        producer.flush("a")
        assert len(producer._producer) == 0
        producer.send("b", OutgoingMessageEnvelope(stream, b"b1"))
        producer.send("a", OutgoingMessageEnvelope(stream, b"a2"))
        producer.flush("b")
        assert len(producer._producer) == 0, "b's flush covers a's record sent before it"
        producer.send("b", OutgoingMessageEnvelope(stream, b"b2"))
        producer.flush("a")  # a's records all preceded b's flush: nothing of its own to wait for
        assert len(producer._producer) == 1
    finally:
        producer.stop()  # flushes everything, whoever sent it
    assert [m.value() for m in read_all(bootstrap, topic, 1)] == [b"a1", b"b1", b"a2", b"b2"]


def test_a_sources_flush_does_not_wait_for_another_sources_sends_and_raises_only_its_own_failures(
    bootstrap, topic_name
):
    """Issue 40 (``systems.<s>.flush.per.source``): a task's commit flushed the whole container's producer.
    Source b sends to a topic deleted after
    the producer looked it up (the broker refuses the record and librdkafka retries it until
    ``message.timeout.ms``); a's flush (sending at once what waits for ``linger.ms``) returns once a's own record
    is acknowledged, with b's still outstanding, and b's flush raises b's failure, never a's."""
    good, gone = topic_name(), topic_name()
    create_topic(bootstrap, good, 1)
    create_topic(bootstrap, gone, 1)
    producer = started_producer(
        kafka_config(
            bootstrap,
            systems__kafka__flush__per__source="true",
            systems__kafka__producer__message__timeout__ms=5_000,
            systems__kafka__producer__linger__ms=2_000,
        )
    )
    assert not producer.flush_covers_every_source
    try:
        producer.send("b", OutgoingMessageEnvelope(SystemStream(SYSTEM, gone), b"b0"))
        producer.flush("b")  # the producer knows the topic and its leader
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics([gone])[gone].result(30)
        producer.send("b", OutgoingMessageEnvelope(SystemStream(SYSTEM, gone), b"b1"))
        producer.send("a", OutgoingMessageEnvelope(SystemStream(SYSTEM, good), b"a1"))
        producer.flush("a")
        assert producer._deliveries is not None
        assert producer._deliveries["a"].outstanding == 0
        assert producer._deliveries["b"].outstanding == 1, "a's flush waited for b's record"
        assert [m.value() for m in read_all(bootstrap, good, 1)] == [b"a1"]
        with pytest.raises(KafkaProduceError, match=f"topic '{gone}' partition 0"):
            producer.flush("b")
        assert producer._deliveries["b"].outstanding == 0
        producer.send("a", OutgoingMessageEnvelope(SystemStream(SYSTEM, good), b"a2"))
        producer.flush("a")  # b's failure was b's: a's flush does not raise it
    finally:
        producer.stop()
    assert [m.value() for m in read_all(bootstrap, good, 1)] == [b"a1", b"a2"]


def _counting_transactional_producer(
    bootstrap: str, job: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[KafkaSystemProducer, list[object]]:
    """A started container changelog producer (transactional, committing at each flush) and the list its
    transaction commits are counted in."""
    producer = KafkaSystemFactory().get_producer(SYSTEM, kafka_config(bootstrap))
    assert isinstance(producer, KafkaSystemProducer)
    producer.set_writer(WriterToken(job, "0", 1, 1))
    producer.start()
    assert producer._transactions is not None
    commits: list[object] = []
    commit = producer._transactions.commit

    def counted(client: Any) -> None:
        commits.append(client)
        commit(client)

    monkeypatch.setattr(producer._transactions, "commit", counted)
    return producer, commits


def test_a_transactional_producer_commits_once_for_the_sources_a_flush_covered(bootstrap, topic_name, monkeypatch):
    """The changelog producer of a container commits its transaction at a flush: the first task to flush in a
    commit round commits every task's records, and the others, which sent nothing since, commit nothing."""
    topic = topic_name()
    create_topic(bootstrap, topic, 2)
    producer, commits = _counting_transactional_producer(bootstrap, f"flush-{topic}", monkeypatch)
    try:
        producer.send("a", OutgoingMessageEnvelope(SystemStream(SYSTEM, topic), b"a", partition=0))
        producer.send("b", OutgoingMessageEnvelope(SystemStream(SYSTEM, topic), b"b", partition=1))
        producer.flush("a")
        wait_until(  # the broker writes the commit markers after the commit returned
            lambda: sorted(m.value() for m in read_all(bootstrap, topic, 2)) == [b"a", b"b"],
            30,
            "b's record was not committed by a's flush",
        )
        producer.flush("b")
        assert len(commits) == 1
        producer.send("b", OutgoingMessageEnvelope(SystemStream(SYSTEM, topic), b"b2", partition=1))
        producer.flush("b")
        assert len(commits) == 2
    finally:
        producer.stop()
    wait_until(
        lambda: [m.value() for m in read_all(bootstrap, topic, 2)] == [b"a", b"b", b"b2"], 30, "b2 was not committed"
    )


def test_commit_threads_queued_behind_a_flush_are_covered_by_one_transaction_commit(bootstrap, topic_name, monkeypatch):
    """A container's changelog producer behind its lock: while one commit thread's flush holds it, twenty tasks'
    commit threads queue up to send and then flush. The first of their flushes to get the lock lets the waiting
    sends go first, so one commit of the transaction covers all twenty, and the other flushes return at once;
    taken in the lock's order, each flush committed the few sends that happened to precede it."""
    topic = topic_name()
    create_topic(bootstrap, topic, 4)
    inner, commits = _counting_transactional_producer(bootstrap, f"queued-{topic}", monkeypatch)
    producer = SerializedProducer(inner)
    stream = SystemStream(SYSTEM, topic)

    def task_commit(task: int) -> None:
        producer.send(f"Partition {task}", OutgoingMessageEnvelope(stream, b"%d" % task, partition=task % 4))
        producer.flush(f"Partition {task}")

    threads = [threading.Thread(target=task_commit, args=(task,), name=f"commit-{task}") for task in range(20)]
    try:
        with producer._lock:  # another commit thread's flush under way
            for thread in threads:
                thread.start()
            wait_until(lambda: producer._sends_asked == 20, 30, "twenty commit threads to queue up to send")
        for thread in threads:
            thread.join(60)
            assert not thread.is_alive(), f"{thread.name} never finished its flush"
        assert len(commits) == 1
    finally:
        producer.stop()
    assert sorted(int(m.value()) for m in read_all(bootstrap, topic, 4)) == list(range(20))


# --- bad configuration and unreachable brokers -------------------------------------------------------


def test_validation_accepts_client_settings_and_refuses_unknown_system_keys(config):
    prepare(config.with_overrides({"systems.kafka.consumer.fetch.min.bytes": "1", "systems.kafka.admin.x": "1"}))
    with pytest.raises(ConfigError, match=r"unknown config key 'systems.kafka.bogus'"):
        prepare(config.with_overrides({"systems.kafka.bogus": "1"}))
    with pytest.raises(ConfigError, match=r"config key 'systems.kafka.default.partitions' has invalid value 'zero'"):
        KafkaSystemFactory().get_admin(SYSTEM, config.with_overrides({"systems.kafka.default.partitions": "zero"}))


def test_a_refused_librdkafka_setting_names_the_key_and_hides_secrets(config):
    bad = config.with_overrides({"systems.kafka.producer.no.such.property": "1"})
    with pytest.raises(KafkaClientConfigError, match=r"systems.kafka.producer.no.such.property"):
        started_producer(bad)
    secret = config.with_overrides(
        {"systems.kafka.consumer.sasl.mechanism": "PLAIN", "sensitive.systems.kafka.consumer.sasl.password": "hunter2"}
    )
    consumer = KafkaSystemFactory().get_consumer(SYSTEM, secret)
    assert consumer.kafka.consumer()["sasl.password"] == "hunter2"
    assert consumer.kafka.redact("password hunter2 refused") == "password ******** refused"
    with pytest.raises(ConfigError, match=r"systems.kafka.bootstrap.servers"):
        KafkaSystemFactory().get_admin(SYSTEM, config.without("systems.kafka.bootstrap.servers"))


@pytest.mark.parametrize("client", ["admin", "consumer", "producer"])
def test_unreachable_brokers_fail_within_the_startup_timeout_naming_them(client):
    address = f"127.0.0.1:{free_port()}"
    config = kafka_config(address, systems__kafka__startup__timeout__ms=1500)
    factory = KafkaSystemFactory()
    with pytest.raises(KafkaBrokersUnreachableError, match=f"no broker at {address} answered within 1.5s"):
        if client == "admin":
            factory.get_admin(SYSTEM, config).start()
        elif client == "consumer":
            consumer = factory.get_consumer(SYSTEM, config)
            consumer.register(SystemStreamPartition(SYSTEM, "t", 0), "0")
            consumer.start()
        else:
            factory.get_producer(SYSTEM, config).start()

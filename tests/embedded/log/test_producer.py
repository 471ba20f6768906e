"""The log's SystemProducer: partition choice, batching, durability at flush, missing and sealed streams."""

from __future__ import annotations

import time
import zlib
from itertools import cycle, islice
from pathlib import Path
from typing import Any

import pytest

from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.consumer import LogSystemConsumer
from millstream.embedded.log.errors import LogStorageError, LogSystemError, PartitionSealedError
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.log.producer import LogSystemProducer
from millstream.embedded.log.storage import LogPartition
from millstream.errors import StreamNotFoundError
from millstream.model import IncomingMessageEnvelope, SystemStream, SystemStreamPartition

from .conftest import SYSTEM, create, envelope, log_config, read_all, ssp


def read_stream(root: Path, stream: str, partitions: int = 1) -> dict[int, list[IncomingMessageEnvelope]]:
    consumer = LogSystemFactory().get_consumer(SYSTEM, log_config(root))
    for partition in range(partitions):
        consumer.register(ssp(stream, partition), "0")
    consumer.start()
    envelopes = read_all(consumer, {ssp(stream, partition) for partition in range(partitions)})
    consumer.stop()
    return {p: [e for e in envelopes if e.ssp.partition == p] for p in range(partitions)}


def upcoming(admin: LogSystemAdmin, stream: str, partition: int = 0) -> int:
    return int(admin.get_ssp_metadata([ssp(stream, partition)])[ssp(stream, partition)].upcoming_offset)


def test_flush_makes_every_sent_record_readable_in_send_order(
    admin: LogSystemAdmin, producer: LogSystemProducer, root: Path
) -> None:
    create(admin, "events")
    for index in range(10):
        producer.send("task", envelope("events", b"%d" % index))
    producer.flush("task")
    assert [e.message for e in read_stream(root, "events")[0]] == [b"%d" % index for index in range(10)]


def test_written_offsets_name_the_newest_record_each_partitions_appends_returned_and_nothing_else(
    admin: LogSystemAdmin, producer: LogSystemProducer
) -> None:
    create(admin, "events", 3)
    create(admin, "other")
    producer.send("task", envelope("events", b"a", partition=1))
    for value in (b"b", b"c", b"d"):
        producer.send("task", envelope("events", value, partition=2))
    asked = [ssp("events", partition) for partition in range(3)] + [SystemStreamPartition("kafka", "events", 2)]
    assert producer.written_offsets(asked) == {}  # buffered, not appended: nothing acknowledged yet
    producer.flush("task")
    assert producer.written_offsets(asked) == {ssp("events", 1): "0", ssp("events", 2): "2"}
    producer.send("task", envelope("events", b"e", partition=2))
    producer.flush("task")
    assert producer.written_offsets([ssp("events", 2)]) == {ssp("events", 2): "3"}
    assert upcoming(admin, "events", 2) == 4


def test_records_below_the_batch_size_stay_buffered_until_flush(
    admin: LogSystemAdmin, producer: LogSystemProducer
) -> None:
    create(admin, "events")
    producer.send("task", envelope("events", b"a"))
    assert upcoming(admin, "events") == 0
    producer.flush("task")
    assert upcoming(admin, "events") == 1


def test_a_partition_buffer_is_appended_when_it_reaches_the_batch_size(admin: LogSystemAdmin, root: Path) -> None:
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root, producer__batch__size=3))
    create(admin, "events")
    for index in range(7):
        producer.send("task", envelope("events", b"%d" % index))
    assert upcoming(admin, "events") == 6, "each full buffer is appended by the send that fills it"
    producer.stop()
    assert upcoming(admin, "events") == 7


def test_a_failed_append_of_a_full_buffer_keeps_its_records_and_later_ones_in_order_for_the_next_flush(
    admin: LogSystemAdmin, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(admin, "events")
    real_append = LogPartition.append_columns
    failures = [LogStorageError("events", 0, root, "disk full") for _ in range(2)]  # the send's, the flush's

    def failing_once(self: LogPartition, *args: Any, **kwargs: Any) -> int:
        if failures:
            raise failures.pop()
        return real_append(self, *args, **kwargs)

    monkeypatch.setattr(LogPartition, "append_columns", failing_once)
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root, producer__batch__size=2))
    for index in range(7):
        producer.send("task", envelope("events", b"%d" % index))
    with pytest.raises(LogStorageError, match="disk full"):
        producer.flush("task")  # appends the kept batches again, which fails once more
    assert upcoming(admin, "events") == 0, "nothing after the failed batch may be appended before it"
    producer.flush("task")
    producer.stop()
    assert [e.message for e in read_stream(root, "events")[0]] == [b"%d" % index for index in range(7)]


def test_stop_flushes_what_is_buffered(admin: LogSystemAdmin, config: Settings) -> None:
    create(admin, "events")
    producer = LogSystemFactory().get_producer(SYSTEM, config)
    producer.send("task", envelope("events", b"a"))
    producer.stop()
    assert upcoming(admin, "events") == 1


def test_the_same_key_goes_to_the_same_partition_from_any_producer(admin: LogSystemAdmin, root: Path) -> None:
    create(admin, "events", 4)
    for _ in range(2):
        producer = LogSystemFactory().get_producer(SYSTEM, log_config(root))
        for key in (b"alice", b"bob", b"carol", b"dave", b"erin"):
            producer.send("task", envelope("events", key, key))
        producer.stop()
    for records in read_stream(root, "events", 4).values():
        keys = [e.key for e in records]
        assert len(keys) == 2 * len(set(keys))


def test_the_partition_key_chooses_the_partition_over_the_key(
    admin: LogSystemAdmin, producer: LogSystemProducer, root: Path
) -> None:
    create(admin, "events", 8)
    for index in range(20):
        producer.send("task", envelope("events", b"v", b"key-%d" % index, partition_key=b"same"))
    producer.flush("task")
    assert sorted(len(records) for records in read_stream(root, "events", 8).values()) == [0] * 7 + [20]


def test_a_pinned_partition_wins_over_any_key(admin: LogSystemAdmin, producer: LogSystemProducer, root: Path) -> None:
    create(admin, "events", 3)
    for index in range(5):
        producer.send("task", envelope("events", b"v", b"key-%d" % index, partition=2))
    producer.flush("task")
    assert len(read_stream(root, "events", 3)[2]) == 5


def test_keyless_records_are_spread_round_robin(admin: LogSystemAdmin, producer: LogSystemProducer, root: Path) -> None:
    create(admin, "events", 3)
    for _ in range(9):
        producer.send("task", envelope("events", b"v"))
    producer.flush("task")
    assert [len(records) for records in read_stream(root, "events", 3).values()] == [3, 3, 3]


def test_a_batch_lands_where_sends_one_by_one_would_in_order(admin: LogSystemAdmin, root: Path) -> None:
    """``send_batch``: keyed records in the partitions ``send`` chooses, keyless ones round robin, each
    partition's records in the batch's order, full buffers appended as ``send`` appends them."""
    create(admin, "by-send", 4)
    create(admin, "by-batch", 4)
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root, producer__batch__size=7))
    keys: list[bytes | None] = [None if index % 5 == 0 else b"key-%d" % (index % 13) for index in range(200)]
    values = [b"%d" % index for index in range(200)]
    for value, key in zip(values, keys, strict=True):
        producer.send("task", envelope("by-send", value, key))
    producer.send_batch("task", SystemStream(SYSTEM, "by-batch"), values[:150], keys[:150])
    producer.send_batch("task", SystemStream(SYSTEM, "by-batch"), values[150:], keys[150:])
    producer.stop()
    by_send, by_batch = read_stream(root, "by-send", 4), read_stream(root, "by-batch", 4)
    for partition in range(4):
        keyed = [(e.key, e.message) for e in by_batch[partition] if e.key is not None]
        assert keyed == [(e.key, e.message) for e in by_send[partition] if e.key is not None]
        keyless = [int(e.message) for e in by_batch[partition] if e.key is None]
        assert len(keyless) == 10 and keyless == sorted(keyless), "40 keyless records, round robin, in order"


@pytest.mark.parametrize("keys", ["none", "all None"])
def test_keyless_batches_are_dealt_round_robin_continuing_the_round_across_batches(
    admin: LogSystemAdmin, root: Path, keys: str
) -> None:
    """The keyless fast path deals a batch by slicing: record ``i`` of all those sent goes to partition
    ``(start + i) % 4`` for one start, whatever the batch sizes (shorter than, equal to, longer than the
    partition count) and however often a buffer fills (batch size 5)."""
    create(admin, "events", 4)
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root, producer__batch__size=5))
    values = [b"%d" % index for index in range(60)]
    sent = 0
    for size in (7, 1, 4, 10, 3, 0, 2, 33):
        batch = values[sent : sent + size]
        producer.send_batch("task", SystemStream(SYSTEM, "events"), batch, None if keys == "none" else [None] * size)
        sent += size
    producer.stop()
    stored = {partition: [e.message for e in records] for partition, records in read_stream(root, "events", 4).items()}
    start = next(p for p in range(4) if stored[p][:1] == [values[0]])
    assert stored == {(start + step) % 4: values[step::4] for step in range(4)}


def test_a_batch_with_a_value_that_is_not_bytes_is_refused_naming_the_stream(
    admin: LogSystemAdmin, producer: LogSystemProducer, root: Path
) -> None:
    create(admin, "events")
    with pytest.raises(LogSystemError, match="log stream 'events': key and message must be bytes"):
        producer.send_batch("task", SystemStream(SYSTEM, "events"), [b"fine", 42], None)  # type: ignore[list-item]
    producer.flush("task")
    assert [e.message for e in read_stream(root, "events")[0]] == [b"fine"], "what came before was sent"


def test_the_timestamp_defaults_to_now_and_an_explicit_one_is_kept(
    admin: LogSystemAdmin, producer: LogSystemProducer, root: Path
) -> None:
    create(admin, "events")
    before = time.time_ns() // 1_000_000
    producer.send("task", envelope("events", b"now"))
    producer.send("task", envelope("events", b"epoch", timestamp=0))
    producer.flush("task")
    after = time.time_ns() // 1_000_000
    now, epoch = read_stream(root, "events")[0]
    assert before <= now.timestamp <= after
    assert epoch.timestamp == 0


def test_sending_to_a_missing_stream_raises_stream_not_found_naming_the_setting(
    producer: LogSystemProducer,
) -> None:
    with pytest.raises(StreamNotFoundError, match=r"'log.missing'.*auto.create.streams"):
        producer.send("task", envelope("missing", b"v"))


def test_auto_create_streams_creates_a_missing_stream_with_the_default_partitions(root: Path) -> None:
    config = log_config(root, auto__create__streams="true", default__partitions=3)
    producer = LogSystemFactory().get_producer(SYSTEM, config)
    producer.send("task", envelope("created", b"v"))
    producer.stop()
    admin = LogSystemFactory().get_admin(SYSTEM, config)
    assert admin.get_system_stream_metadata(["created"])["created"].partition_count == 3


def test_auto_create_streams_uses_an_existing_stream_as_it_is(admin: LogSystemAdmin, root: Path) -> None:
    create(admin, "events", 2)
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root, auto__create__streams="true"))
    producer.send("task", envelope("events", b"v", partition=1))
    producer.stop()
    assert upcoming(admin, "events", 1) == 1


def test_flush_to_a_sealed_partition_raises_naming_stream_and_partition(admin: LogSystemAdmin, root: Path) -> None:
    create(admin, "events", 2)
    admin.seal_stream("events")
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root))
    producer.send("task", envelope("events", b"v", partition=1))
    with pytest.raises(PartitionSealedError, match=r"'events' partition 1"):
        producer.flush("task")
    with pytest.raises(PartitionSealedError):
        producer.stop()


def test_a_failed_append_keeps_its_records_so_every_later_flush_fails_too(admin: LogSystemAdmin, root: Path) -> None:
    create(admin, "events")
    admin.seal_stream("events")
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root))
    producer.send("task", envelope("events", b"v"))
    for _ in range(2):
        with pytest.raises(PartitionSealedError):
            producer.flush("task")
    with pytest.raises(PartitionSealedError):
        producer.stop()
    assert upcoming(admin, "events") == 0


def test_a_pinned_partition_the_stream_lacks_is_refused(admin: LogSystemAdmin, producer: LogSystemProducer) -> None:
    create(admin, "events", 2)
    with pytest.raises(LogSystemError, match=r"'events' has partitions 0..1; an envelope asked for partition 2"):
        producer.send("task", envelope("events", b"v", partition=2))


def test_unserialized_keys_or_messages_are_refused_naming_the_stream(
    admin: LogSystemAdmin, producer: LogSystemProducer
) -> None:
    create(admin, "events")
    with pytest.raises(LogSystemError, match=r"'events': key and message must be bytes"):
        producer.send("task", envelope("events", {"not": "bytes"}))  # type: ignore[arg-type]


def test_headers_that_cannot_be_encoded_are_refused_naming_the_stream(
    admin: LogSystemAdmin, producer: LogSystemProducer
) -> None:
    create(admin, "events")
    with pytest.raises(LogSystemError, match=r"'events': headers must map str to bytes"):
        producer.send("task", envelope("events", b"v", headers={"h": object()}))


@pytest.mark.parametrize("headers", [{"h": 1}, {"h": "text"}, {1: b"v"}, [("h", b"v")]])
def test_headers_other_than_str_to_bytes_are_refused_at_send_not_at_flush(
    admin: LogSystemAdmin, producer: LogSystemProducer, headers: object
) -> None:
    create(admin, "events")
    with pytest.raises(LogSystemError, match=r"'events': headers must map str to bytes"):
        producer.send("task", envelope("events", b"v", headers=headers))
    producer.flush("task")
    assert upcoming(admin, "events") == 0


def test_headers_are_copied_at_send_so_later_changes_do_not_reach_the_log(
    admin: LogSystemAdmin, producer: LogSystemProducer, root: Path
) -> None:
    create(admin, "events")
    headers = {"trace": b"1"}
    producer.send("task", envelope("events", b"v", headers=headers))
    headers["trace"] = b"2"
    producer.flush("task")
    assert [e.headers for e in read_stream(root, "events")[0]] == [{"trace": b"1"}]


def test_sending_to_another_system_is_refused(producer: LogSystemProducer) -> None:
    wrong = envelope("events", b"v")
    wrong.system_stream = wrong.system_stream._replace(system="kafka")
    with pytest.raises(LogSystemError, match=r"producer of system 'log' cannot send to 'kafka.events'"):
        producer.send("task", wrong)


def test_another_system_is_refused_right_after_a_send_to_this_one(
    admin: LogSystemAdmin, producer: LogSystemProducer
) -> None:
    create(admin, "events")
    producer.send("task", envelope("events", b"v"))
    wrong = envelope("events", b"w")
    wrong.system_stream = wrong.system_stream._replace(system="kafka")
    with pytest.raises(LogSystemError, match=r"producer of system 'log' cannot send to 'kafka.events'"):
        producer.send("task", wrong)
    producer.flush("task")
    assert upcoming(admin, "events") == 1


def test_sends_alternating_between_streams_each_reach_their_own_stream_in_order(
    admin: LogSystemAdmin, producer: LogSystemProducer, root: Path
) -> None:
    create(admin, "events")
    create(admin, "audit")
    for index in range(6):
        producer.send("task", envelope("events" if index % 2 else "audit", b"%d" % index))
    producer.flush("task")
    assert [e.message for e in read_stream(root, "audit")[0]] == [b"0", b"2", b"4"]
    assert [e.message for e in read_stream(root, "events")[0]] == [b"1", b"3", b"5"]


def test_flush_of_one_source_also_commits_what_other_sources_sent_to_the_same_partition(
    admin: LogSystemAdmin, producer: LogSystemProducer, consumer: LogSystemConsumer
) -> None:
    create(admin, "events")
    producer.register("a")
    producer.register("b")
    producer.send("a", envelope("events", b"from-a"))
    producer.send("b", envelope("events", b"from-b"))
    producer.flush("a")
    assert upcoming(admin, "events") == 2


def test_flush_of_one_source_leaves_other_sources_partitions_buffered_until_their_own_flush(
    admin: LogSystemAdmin, root: Path
) -> None:
    create(admin, "events", 3)
    create(admin, "audit")
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root, producer__linger__ms=600_000))
    producer.send("a", envelope("events", b"a0", partition=0))
    producer.send("b", envelope("events", b"b1", partition=1))
    producer.send("b", envelope("audit", b"b-audit"))
    producer.send("a", envelope("events", b"a2", partition=2))
    producer.flush("a")
    assert [upcoming(admin, "events", p) for p in range(3)] == [1, 0, 1] and upcoming(admin, "audit") == 0
    producer.flush("a")
    assert [upcoming(admin, "events", p) for p in range(3)] == [1, 0, 1], "a sent nothing since its flush"
    assert producer.send_lingering() is not None, "b's records still linger"
    producer.flush("b")
    assert [upcoming(admin, "events", p) for p in range(3)] == [1, 1, 1] and upcoming(admin, "audit") == 1
    assert producer.send_lingering() is None, "nothing is left to linger"
    producer.stop()


class _CountedBuffers(list[Any]):
    """A stream writer's partition buffers that count the walks over all of them."""

    walks = 0

    def __iter__(self) -> Any:
        self.walks += 1
        return super().__iter__()


def test_flushes_and_lingering_look_only_at_the_buffered_partitions_not_at_every_partition_of_the_stream(
    admin: LogSystemAdmin, root: Path
) -> None:
    """A container writes a changelog partition per task and each task flushes its own at its commit: a walk over
    every partition per flush made a round of commits cost the square of the tasks."""
    create(admin, "changelog", 1000)
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root, producer__linger__ms=600_000))
    producer.send("task-0", envelope("changelog", b"opened", partition=0))
    producer.flush("task-0")
    writer = producer._writers["changelog"]
    buffers = writer.buffers = _CountedBuffers(writer.buffers)
    # task-4's keyless records go round robin from a random partition: started at 500, they share no partition's
    # buffer with tasks 0 to 2 (partitions 0 to 2) or task-3's key, whose flushes would append them too
    assert zlib.crc32(b"k") % 1000 not in (500, 501)
    writer.round_robin = islice(cycle(range(1000)), 500, None)
    stream = SystemStream(SYSTEM, "changelog")
    for task in range(3):
        producer.send(f"task-{task}", envelope("changelog", b"v", partition=task))
    producer.send_batch("task-3", stream, [b"k"], [b"k"])
    producer.send_batch("task-4", stream, [b"1", b"2"], None)
    for task in range(4):
        producer.flush(f"task-{task}")
        assert producer.send_lingering() is not None, f"task-4's records still linger after task-{task}'s flush"
    assert producer.send_lingering(drained=True) is None, "task-4's records were appended: nothing lingers"
    walks = buffers.walks
    assert walks == 0, "a flush or the linger check walked over every partition's buffer"
    assert sum(upcoming(admin, "changelog", p) for p in range(1000)) == 1 + 3 + 1 + 2
    producer.stop()


def test_flush_of_a_source_covers_the_partitions_its_batches_went_to(
    admin: LogSystemAdmin, producer: LogSystemProducer
) -> None:
    create(admin, "events", 4)
    stream = SystemStream(SYSTEM, "events")
    producer.send_batch("a", stream, [b"1", b"2", b"3"], None)
    producer.send_batch("a", stream, [b"4", b"5"], [b"k1", b"k2"])
    producer.send("b", envelope("events", b"b", partition=0))
    producer.flush("a")
    keyed = {zlib.crc32(key) % 4 for key in (b"k1", b"k2")}
    written = {p for p in range(4) if upcoming(admin, "events", p)}
    assert keyed <= written and len(written) >= 3, "every partition a's keyless round and keyed records reached"
    assert sum(upcoming(admin, "events", p) for p in range(4)) == 5 + (0 in written), "b's only if it shared one"
    producer.flush("b")
    assert sum(upcoming(admin, "events", p) for p in range(4)) == 6


def test_after_a_failed_append_the_next_flush_of_any_source_appends_everything_and_raises(
    admin: LogSystemAdmin, root: Path
) -> None:
    create(admin, "events")
    create(admin, "audit")
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root, producer__batch__size=1))
    admin.seal_stream("events")
    producer.send("b", envelope("audit", b"b"))
    producer.send("a", envelope("events", b"a"))  # fills its buffer: the append fails and waits for a flush
    with pytest.raises(PartitionSealedError, match=r"'events' partition 0"):
        producer.flush("b")
    assert upcoming(admin, "audit") == 1


def test_flush_after_the_stream_was_re_created_fails_instead_of_writing_to_the_old_files(
    admin: LogSystemAdmin, root: Path
) -> None:
    create(admin, "events")
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root))
    producer.send("task", envelope("events", b"first"))
    producer.flush("task")
    admin.clear_stream(StreamSpec(SYSTEM, "events"))
    create(admin, "events")
    producer.send("task", envelope("events", b"second"))
    with pytest.raises(LogStorageError, match=r"'events' partition 0.*deleted or replaced"):
        producer.flush("task")
    with pytest.raises(LogStorageError):
        producer.stop()


def test_a_record_held_for_batching_is_written_once_it_lingered(admin: LogSystemAdmin, root: Path) -> None:
    create(admin, "t", 2)
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root, producer__linger__ms=0))
    producer.start()
    assert producer.send_lingering() is None  # nothing held back
    producer.send("test", envelope("t", b"a", partition=0))
    producer.send("test", envelope("t", b"b", partition=1))
    assert upcoming(admin, "t", 0) == 0  # held back for batching, not written yet
    assert producer.send_lingering() is None
    assert (upcoming(admin, "t", 0), upcoming(admin, "t", 1)) == (1, 1)
    producer.stop()


def test_a_record_is_held_back_until_its_linger_passes(admin: LogSystemAdmin, root: Path) -> None:
    create(admin, "t")
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root, producer__linger__ms=600_000))
    producer.start()
    producer.send("test", envelope("t", b"a"))
    left = producer.send_lingering()
    assert left is not None and 0 < left <= 600
    assert upcoming(admin, "t") == 0
    producer.flush("test")
    assert upcoming(admin, "t") == 1 and producer.send_lingering() is None
    producer.stop()


def test_records_held_for_batching_are_written_at_once_when_the_input_is_drained(
    admin: LogSystemAdmin, root: Path
) -> None:
    create(admin, "t")
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(root, producer__linger__ms=600_000))
    producer.start()
    producer.send("test", envelope("t", b"a"))
    assert producer.send_lingering() is not None and upcoming(admin, "t") == 0  # ten minutes to linger
    assert producer.send_lingering(drained=True) is None
    assert upcoming(admin, "t") == 1, "written at once: no record would join the batch"
    producer.stop()


def test_records_may_be_told_to_linger_their_whole_time_even_when_the_input_is_drained(
    admin: LogSystemAdmin, root: Path
) -> None:
    create(admin, "t")
    config = log_config(root, producer__linger__ms=600_000, producer__linger__when__drained=True)
    producer = LogSystemFactory().get_producer(SYSTEM, config)
    producer.start()
    producer.send("test", envelope("t", b"a"))
    assert producer.send_lingering(drained=True) is not None and upcoming(admin, "t") == 0  # waits for its linger
    producer.flush("test")
    assert upcoming(admin, "t") == 1
    producer.stop()

"""A single-partition compacted topic used as a replicated log: the checkpoint topic and the
coordinator stream (the Kafka metadata store) are both built on it.

Two pieces:

* :class:`LogReader` reads the partition in ``read_committed`` mode and knows its exact position,
  including past transaction markers and aborted records (librdkafka reports those through
  partition-EOF events). :meth:`LogReader.catch_up` reads up to the **high watermark** taken when
  it is called, not the last stable offset: a transaction still open below the high watermark is
  waited for, so a reader sees every write that completed before the read began (read-your-writes
  across processes), and nothing a writer may still abort.
* :class:`TransactionalWriter` wraps a transactional librdkafka producer: writes become visible
  atomically at commit, an aborted write is never seen by any reader and is removed by the log
  cleaner, and starting a producer with the same ``transactional.id`` aborts a predecessor's open
  transaction and fences it (its next commit fails).

Together they give the writer a point between "my record is in the log" and "my record is
visible" at which it may still decide: a record that would break a condition is aborted instead of
committed. Because a reader blocks on an open transaction below the high watermark, every reader
that starts after the writer's decision sees the decided outcome, and none sees the record before.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from millstream.connectors.kafka.admin import KafkaSystemAdmin
from millstream.connectors.kafka.client import (
    PURGED_CODES,
    RETRIABLE_CODES,
    check_brokers,
    create_client,
    create_topic,
    is_retriable,
    kafka_error,
    listed_offset,
    topic_partitions,
)
from millstream.connectors.kafka.config import KafkaClientSettings
from millstream.connectors.kafka.errors import KafkaSystemError

log = logging.getLogger(__name__)

WARN_INTERVAL_S = 10.0
FETCH_WAIT_MAX_MS = 10
"""How long the broker holds a reader's fetch when it has nothing new. A reader waiting for a
transaction to be decided is not woken by the decision, only by this timeout (500 ms by default),
so it is short; the partition is unassigned between reads so an idle reader does not fetch at all."""
RECONNECT_BACKOFF_MAX_MS = 1000
"""librdkafka waits up to 10 s between reconnects to a broker that is down; a log writer or reader blocks a commit
or a start meanwhile, so after a broker restart it reconnects within a second instead."""
SEGMENT_BYTES = 26_214_400
"""Segment size of the log topics, as Samza's checkpoint and coordinator topics: small enough for the
cleaner to compact them long before the default 1 GiB segment would roll."""
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES)}
_TOPIC_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]")


class ReplicatedLogTopicError(KafkaSystemError):
    """A log topic exists but is not a single-partition compacted topic; names topic and brokers."""


class ReplicatedLogTimeoutError(KafkaSystemError):
    """The brokers did not let an operation on a replicated log finish in time; names the topic."""


class StalledProducerError(ReplicatedLogTimeoutError):
    """The producer got no answer to a write for twice its transaction timeout, by when the brokers have aborted
    the transaction: the producer is stuck (once seen after a broker restart: its request to the transaction
    coordinator never left its queue) and is replaced by a new one, which fences it."""


class TransactionAbortedError(KafkaSystemError):
    """A record of the open transaction was not delivered (the brokers were away too long): the
    transaction must be aborted and the write done again."""


class FencedWriterError(KafkaSystemError):
    """Another producer with the same ``transactional.id`` started: this one may never write again."""


def log_topic_name(kind: str, job_name: str, job_id: str) -> str:
    """``__millstream-<kind>-<job.name>-<job.id>``, characters Kafka refuses in a topic name replaced by ``_``."""
    return _TOPIC_CHARACTERS.sub("_", f"__millstream-{kind}-{job_name}-{job_id}")[:249]


def ensure_log_topic(kafka: KafkaClientSettings, topic: str, replication_factor: int, what: str) -> None:
    """Create the single-partition compacted ``topic`` if missing; refuse one that is not such a topic
    (more partitions would break the log's total order, retention would delete what it holds)."""
    admin = create_client(AdminClient, kafka.admin(), "admin", kafka)
    metadata = check_brokers(admin, kafka)
    partitions = topic_partitions(metadata, topic)
    if partitions is None:
        create_topic(admin, kafka, topic, 1, replication_factor, TOPIC_CONFIG)
        return
    if partitions != 1:
        raise ReplicatedLogTopicError(
            f"{what} topic '{topic}' at {kafka.bootstrap_servers} has {partitions} partitions; it must have exactly 1"
        )
    policy = KafkaSystemAdmin(kafka.system, kafka).topic_config(topic).get("cleanup.policy", "")
    if "compact" not in policy.split(","):
        raise ReplicatedLogTopicError(
            f"{what} topic '{topic}' at {kafka.bootstrap_servers} has cleanup.policy={policy!r}; it must be "
            "'compact', or retention would delete what it holds"
        )


def _describe(error: BaseException) -> str:
    inner = kafka_error(error)
    return inner.str() if inner is not None else str(error)


class LogReader:
    """Reads partition 0 of ``topic`` from the beginning, handing every committed record to ``apply``."""

    def __init__(
        self, kafka: KafkaClientSettings, topic: str, apply: Callable[[Any], None], *, client: str = "reader"
    ) -> None:
        self.kafka = kafka
        self.topic = topic
        self.apply = apply
        self.position = 0
        """The next offset to read: every committed record below it has been applied."""
        settings = kafka.consumer(
            **{
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "client.id": f"millstream-{kafka.system}-{client}",
                "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,
                "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
            }
        )
        self._consumer = create_client(Consumer, settings, "consumer", kafka)
        self._admin = create_client(AdminClient, kafka.admin(), "admin", kafka)
        check_brokers(self._admin, kafka)
        # Knowing the topic's leader before the first assign saves a metadata round trip that
        # librdkafka otherwise often schedules most of a second later.
        self._consumer.list_topics(topic=topic, timeout=kafka.settings.startup_timeout_ms / 1000)
        self._partition = KafkaTopicPartition(topic, 0)
        self._last_warning = 0.0

    def close(self) -> None:
        self._consumer.close()

    def rewind(self) -> None:
        """Read again from the beginning (the caller clears what it built from the records)."""
        self.position = 0

    def high_watermark(self, deadline: float) -> int:
        """The end of the log, open transactions included.

        After a failure the admin client is replaced: librdkafka's admin client keeps sending a
        partition's old leader epoch after a broker restart and fails with FENCED_LEADER_EPOCH
        until it is recreated.
        """
        while True:
            remaining = deadline - time.monotonic()
            try:
                futures = self._admin.list_offsets(
                    {self._partition: OffsetSpec.latest()},
                    isolation_level=IsolationLevel.READ_UNCOMMITTED,
                    request_timeout=max(1.0, min(remaining, 30.0)),
                )
                return listed_offset(self.topic, 0, futures[self._partition].result())
            except KafkaException as error:
                if not is_retriable(error) and kafka_error(error) is not None:
                    inner = kafka_error(error)
                    assert inner is not None
                    if inner.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        raise KafkaSystemError(f"topic '{self.topic}' does not exist (deleted while in use?)") from None
                self._warn(f"reading the end offset of topic '{self.topic}'", error)
                if time.monotonic() >= deadline:
                    raise ReplicatedLogTimeoutError(
                        f"topic '{self.topic}' at {self.kafka.bootstrap_servers}: cannot read its end offset: "
                        f"{_describe(error)}"
                    ) from None
                time.sleep(0.2)
                self._admin = create_client(AdminClient, self.kafka.admin(), "admin", self.kafka)

    def catch_up(self, deadline: float) -> None:
        """Apply every record committed before this call started."""
        self.read_until(self.high_watermark(deadline), deadline)

    def read_until(self, target: int, deadline: float, *, watch: int | None = None) -> bool:
        """Apply committed records until the position reaches ``target``; True if the record at offset
        ``watch`` was among them (it was committed)."""
        if self.position >= target:
            return False
        # Assigned only while reading: an assigned partition is fetched continuously (every
        # FETCH_WAIT_MAX_MS when idle), and pause/resume costs most of a second in librdkafka. An
        # explicit offset, even 0, also starts faster than OFFSET_BEGINNING (no offset lookup); a
        # log whose start was compacted or deleted away resets to its start (auto.offset.reset).
        self._consumer.assign([KafkaTopicPartition(self.topic, 0, self.position)])
        try:
            return self._read_until(target, deadline, watch)
        finally:
            self._consumer.unassign()

    def _read_until(self, target: int, deadline: float, watch: int | None) -> bool:
        seen = False
        consumer = self._consumer
        while self.position < target:
            messages = consumer.consume(1000, 0)
            if not messages:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ReplicatedLogTimeoutError(
                        f"topic '{self.topic}' at {self.kafka.bootstrap_servers}: reading up to offset {target} "
                        f"did not finish in time (stuck at offset {self.position}: brokers unavailable, or a "
                        "transaction left open by a crashed writer that has not timed out yet)"
                    )
                single = consumer.poll(min(remaining, 0.2))
                messages = [single] if single is not None else []
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        self.position = max(self.position, message.offset() or 0)
                        continue
                    if error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                        raise KafkaSystemError(f"topic '{self.topic}' does not exist (deleted while in use?)")
                    if error.fatal():
                        raise KafkaSystemError(f"reading topic '{self.topic}' failed: {error.str()}")
                    self._warn(f"reading topic '{self.topic}'", KafkaException(error))
                    continue
                offset: int = message.offset()  # type: ignore[assignment]  # set on every record
                if offset == watch:
                    seen = True
                self.position = offset + 1
                self.apply(message)
        return seen

    def _warn(self, what: str, error: BaseException) -> None:
        now = time.monotonic()
        if now - self._last_warning >= WARN_INTERVAL_S:
            self._last_warning = now
            log.warning("%s: %s (retrying)", what, _describe(error))


class TransactionalWriter:
    """One transactional producer writing to partition 0 of ``topic``."""

    def __init__(
        self,
        kafka: KafkaClientSettings,
        topic: str,
        transactional_id: str,
        *,
        transaction_timeout_ms: int,
        client: str = "writer",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kafka = kafka
        self.topic = topic
        self.transactional_id = transactional_id
        self._clock = clock
        self._stall_s = 2 * transaction_timeout_ms / 1000
        """How long a write may go unacknowledged before the producer counts as stuck (see
        :class:`StalledProducerError`): a transaction cannot outlive its timeout, so no healthy write takes longer."""
        self._settings = kafka.producer(
            **{
                "transactional.id": transactional_id,
                "transaction.timeout.ms": transaction_timeout_ms,
                "client.id": f"millstream-{kafka.system}-{client}",
                "linger.ms": 0,
                "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
            }
        )
        self._producer: Producer | None = None
        self._in_transaction = False

    def open(self, deadline: float) -> None:
        """Create the producer and register the transactional id: aborts and fences any earlier
        producer with the same id."""
        if self._producer is not None:
            return
        producer = create_client(Producer, self._settings, "producer", self.kafka)
        while True:
            try:
                producer.init_transactions(max(1.0, min(deadline - self._clock(), 30.0)))
                break
            except KafkaException as error:
                self._raise_unless_retriable(error, "starting a transactional producer", deadline)
        self._producer = producer
        self._in_transaction = False

    def discard(self) -> None:
        """Forget the producer (after a fatal error); the next :meth:`open` starts a new one."""
        self._producer = None
        self._in_transaction = False

    def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None and self._in_transaction:
            with contextlib.suppress(KafkaException):
                producer.abort_transaction(5)

    @property
    def is_open(self) -> bool:
        return self._producer is not None

    def _require(self) -> Producer:
        if self._producer is None:
            raise KafkaSystemError(f"the transactional producer of topic '{self.topic}' is not started")
        return self._producer

    def begin(self) -> None:
        self._require().begin_transaction()
        self._in_transaction = True

    def append(self, records: list[tuple[bytes, bytes | None]], deadline: float) -> int:
        """Produce ``records`` in the open transaction, wait until the broker has them and return the
        offset of the last one (still invisible to readers until commit)."""
        producer = self._require()
        offsets: list[int] = []
        failures: list[KafkaError] = []

        def delivered(error: KafkaError | None, message: Any) -> None:
            if error is not None:
                failures.append(error)
            else:
                offsets.append(int(message.offset()))

        for key, value in records:
            producer.produce(self.topic, value, key, 0, on_delivery=delivered)
        stalled = self._clock() + self._stall_s
        while producer.flush(max(0.1, min(deadline - self._clock(), 1.0))) > 0:
            now = self._clock()
            if now >= deadline:
                raise ReplicatedLogTimeoutError(
                    f"topic '{self.topic}' at {self.kafka.bootstrap_servers}: a write was not acknowledged in time"
                )
            if now >= stalled:
                raise StalledProducerError(
                    f"topic '{self.topic}' at {self.kafka.bootstrap_servers}: a write went unacknowledged for "
                    f"{self._stall_s:.0f}s, twice the transaction timeout: the producer is replaced"
                )
        if failures:  # a record's own failure says more than the purge of the others it caused
            error = next((failure for failure in failures if failure.code() not in PURGED_CODES), failures[0])
            if error.retriable() or error.code() in (KafkaError._MSG_TIMED_OUT, *RETRIABLE_CODES, *PURGED_CODES):
                raise TransactionAbortedError(f"topic '{self.topic}': a write was not delivered: {error.str()}")
            raise KafkaException(error)
        return max(offsets)

    def commit(self, deadline: float) -> None:
        producer = self._require()
        while True:
            try:
                producer.commit_transaction(max(1.0, min(deadline - self._clock(), 30.0)))
                self._in_transaction = False
                return
            except KafkaException as error:
                inner = kafka_error(error)
                if inner is not None and inner.txn_requires_abort():
                    raise
                self._raise_unless_retriable(error, "committing a transaction", deadline)

    def abort(self, deadline: float) -> None:
        producer = self._require()
        while True:
            try:
                producer.abort_transaction(max(1.0, min(deadline - self._clock(), 30.0)))
                self._in_transaction = False
                return
            except KafkaException as error:
                self._raise_unless_retriable(error, "aborting a transaction", deadline)

    def _raise_unless_retriable(self, error: KafkaException, what: str, deadline: float) -> None:
        inner = kafka_error(error)
        if inner is not None and inner.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED):
            raise FencedWriterError(
                f"topic '{self.topic}': {what} failed: producer '{self.transactional_id}' was fenced by a newer one"
            ) from None
        if inner is not None and inner.fatal():
            raise
        if not is_retriable(error) and not (inner is not None and inner.retriable()):
            raise
        if self._clock() >= deadline:
            raise ReplicatedLogTimeoutError(
                f"topic '{self.topic}' at {self.kafka.bootstrap_servers}: {what} did not finish in time: "
                f"{_describe(error)}"
            ) from None
        time.sleep(0.1)


def classify(error: BaseException) -> str:
    """``fenced``, ``fatal`` (the producer is unusable), ``abort`` (abort and redo the transaction)
    or ``retry`` (transient; redo the whole write)."""
    if isinstance(error, FencedWriterError):
        return "fenced"
    if isinstance(error, StalledProducerError):
        return "fatal"
    if isinstance(error, TransactionAbortedError):
        return "abort"
    inner = kafka_error(error)
    if inner is None:
        return "retry" if isinstance(error, ReplicatedLogTimeoutError) else "other"
    if inner.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH):
        return "fenced"
    if inner.fatal():
        return "fatal"
    if inner.txn_requires_abort():
        return "abort"
    if inner.retriable() or is_retriable(error):
        return "retry"
    if inner.code() == KafkaError._STATE:
        return "abort"
    return "other"

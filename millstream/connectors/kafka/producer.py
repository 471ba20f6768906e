"""Writes envelopes to Kafka topics with an idempotent librdkafka producer.

* **Partitioning.** A pinned ``partition`` wins; a ``partition_key`` other than the key is hashed here
  with Kafka's murmur2 (see ``partitioner``); otherwise librdkafka partitions by key with the same
  murmur2 (``partitioner=murmur2_random``), so a key lands where a Java producer would put it, and
  keyless messages are spread at random.
* **Durability.** ``flush`` returns once every message sent before it is acknowledged by all in-sync
  replicas (``acks=all``), and raises if any failed: this is what the runtime's commit waits for
  before it checkpoints, so output is at-least-once. The producer is idempotent: librdkafka's
  retries (a broker restarting, a leader moving) never duplicate or reorder a partition's messages.
* **Fencing.** A container's transactional producer (``WriterToken.pooled``: its changelog writes, and
  everything under exactly-once) writes in transactions (``transactions``): a newer attempt of the container
  aborts and fences the older one's, whose every later send and flush raises ``WriterFencedError``. Its
  output producer is idempotent and not transactional under at-least-once, so output is visible at once.
  A fence or abort by the brokers (a broker restart, a transaction's timeout) while the metadata store names
  no newer attempt is ridden out under at-least-once: a new producer takes over the transactional id and the
  aborted transaction's records are sent again (``replay``) before it commits.
  Sends and flushes of a transactional producer come from one thread at a time (the container's run loop).
* **Riding out outages.** Topic metadata, flushes and transaction commits retry transient errors until
  ``systems.<s>.outage.timeout.ms`` and then fail naming the call and the brokers.
* **A source's flush waits for that source.** With ``systems.<s>.flush.per.source``, a producer that is not
  transactional (a container's output under at-least-once) counts each source's messages not yet
  acknowledged (``deliveries``: one more at the send, one less in its delivery report), and
  ``flush(source)`` waits only until ``source``'s count is 0, then raises ``source``'s failures: a task's
  commit waits for its own sends, not for the other tasks' (librdkafka can only flush a whole producer);
  each message's delivery report then costs about a microsecond of Python. Otherwise, and always for a
  transactional producer (its commit needs everything of the transaction acknowledged), ``flush(source)``
  waits (and, when its flush commits, commits) for everything, but only when ``source`` sent since the last
  flush began; the sources whose sends all came before it need no flush of their own, so a container's
  tasks committing in turn pay one wait (one transaction of the changelog producer) per round, not one per
  task.
* **Errors are never lost.** librdkafka reports failures asynchronously, in delivery reports (for every
  message of a counting producer, only failures otherwise: ``delivery.report.only.error``), which record
  them; the next ``flush`` (of the failed message's source, when counted) raises the first one, naming topic
  and partition. A record too large for the producer is refused at ``send``, one too large for the topic at
  the next ``flush``, both naming the topic.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from millstream.connectors.kafka.client import (
    PURGED_CODES,
    check_brokers,
    create_client,
    create_topic,
    kafka_error,
    retry,
    topic_partitions,
)
from millstream.connectors.kafka.config import KafkaClientSettings
from millstream.connectors.kafka.deliveries import SourceDeliveries
from millstream.connectors.kafka.errors import (
    KafkaProduceError,
    KafkaRecordTooLargeError,
    KafkaSystemError,
    KafkaTransactionAbortedError,
)
from millstream.connectors.kafka.partitioner import partition_for_key
from millstream.connectors.kafka.replay import TransactionReplay
from millstream.connectors.kafka.transactions import ProducerTransactions
from millstream.contracts.metadata import FencedError
from millstream.contracts.systems import SystemProducer, WriterFencedError, WriterToken
from millstream.errors import StreamNotFoundError
from millstream.model import OutgoingMessageEnvelope, SystemStream

log = logging.getLogger(__name__)

_BYTES_LIKE = (bytes, bytearray, memoryview)
_TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
SERVE_EVERY = 1000
"""Sends between two ``poll(0)`` calls, which serve librdkafka's callbacks (failures, logs)."""
SOURCE_WAIT_S = 0.02
"""Longest wait of one bounded ``flush`` while a source's flush waits for its count to reach 0: it returns early
only once every source's messages are acknowledged, so the source's count is looked at again this often (the
most a source's flush waits past its own last acknowledgement)."""


class KafkaSystemProducer(SystemProducer):
    """``SystemProducer`` of a Kafka system; thread-safe (librdkafka's producer is)."""

    def __init__(
        self,
        system: str,
        kafka: KafkaClientSettings,
        *,
        auto_create_streams: bool = False,
        default_partitions: int = 1,
        default_replication_factor: int = -1,
        transactional: bool = False,
        transaction_timeout_ms: int = 60_000,
        commit_on_flush: bool = True,
        writer_current: Callable[[WriterToken], bool] | None = None,
        flush_per_source: bool = False,
    ) -> None:
        """``commit_on_flush``: a transactional producer's ``flush`` commits its transaction (at-least-once,
        where only changelogs are in it); false under exactly-once, where the container's commit ends the
        transaction after the checkpoints joined it (``commit_transaction``). ``writer_current``: whether the
        metadata store still names the writer's attempt, which tells a fence by the brokers (ridden out) from
        one by a newer attempt; without it every fence is taken for a newer attempt's. ``flush_per_source``:
        count each source's messages so that its flush waits for them only (``deliveries``; not transactional
        producers)."""
        self._flush_per_source = flush_per_source
        self._writer_current = writer_current
        self._replay: TransactionReplay | None = None
        """At-least-once, transactional: the open transaction's records, sent again if the brokers abort it."""
        self._settings: dict[str, Any] = {}
        self.system = system
        self._transactional = transactional
        self._commit_on_flush = commit_on_flush
        self._transaction_timeout_ms = transaction_timeout_ms
        self._writer: WriterToken | None = None
        self._transactions: ProducerTransactions | None = None
        self.kafka = kafka
        self._auto_create = auto_create_streams
        self._default_partitions = default_partitions
        self._default_replication = default_replication_factor
        self._producer: Producer | None = None
        self._partition_counts: dict[str, int] = {}
        self._targets: dict[SystemStream, tuple[str, int]] = {}
        self._last: tuple[SystemStream | None, str, int] = (None, "", 0)
        """The stream sent to last, its topic and partition count: one reference, so threads see them together."""
        self._produce: Any = self._not_started
        self._poll: Any = self._not_started
        """The started producer's ``produce`` and ``poll``, bound once."""
        self._failures: list[KafkaProduceError] = []
        self._failed = 0
        self._lock = threading.Lock()
        self._unserved = 0
        self._sent_since_flush: set[str] = set()
        """Sources that sent since the last flush began (``flush``); changed under ``_lock``."""
        self._last_source: str | None = None
        """The source that sent last, already in ``_sent_since_flush``: a send by it skips the set."""
        self._deliveries: dict[str, SourceDeliveries] | None = None
        """Per source, its messages not yet acknowledged (a producer that is not transactional); None: not
        counted (transactional: a flush covers everything)."""
        self._counted: tuple[str | None, SourceDeliveries | None] = (None, None)
        """The source that sent last and its count: one reference, so threads see them together."""

    def set_writer(self, writer: WriterToken) -> None:
        self._writer = writer

    def start(self) -> None:
        """Connect, failing within ``startup.timeout.ms`` (naming the brokers) when none answers; a
        container's pooled producer then takes over its transactional id, fencing earlier attempts."""
        if self._producer is not None:
            return
        transactions = None
        writer = self._writer if self._transactional else None
        # a transaction's commit needs everything flushed: only a producer without one counts per source
        counting = self._flush_per_source and (writer is None or not writer.pooled)
        overrides: dict[str, Any] = {"delivery.report.only.error": not counting, "on_delivery": self._on_delivery}
        if writer is not None and writer.pooled:
            settings = self.kafka.settings
            transactions = ProducerTransactions(
                self.system,
                writer,
                settings.outage_timeout_ms,
                self.kafka.bootstrap_servers,
                request_timeout_ms=settings.operation_timeout_ms,
            )
            overrides["transactional.id"] = transactions.transactional_id
            overrides["transaction.timeout.ms"] = self._transaction_timeout_ms
        self._settings = self.kafka.producer(**overrides)
        producer = create_client(Producer, self._settings, "producer", self.kafka)
        check_brokers(producer, self.kafka)
        if transactions is not None:
            transactions.start(producer)
        self._transactions = transactions
        self._deliveries = {} if counting else None
        self._counted = (None, None)
        if transactions is not None and self._commit_on_flush:
            self._replay = TransactionReplay()
        self._use(producer)

    def _use(self, producer: Producer) -> None:
        self._producer = producer
        self._produce = producer.produce if self._replay is None else self._replay.recording(producer.produce)
        self._poll = producer.poll

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        """Record a failed delivery. A poll that met the producer's fatal error (the brokers fenced it) still
        serves the delivery reports after it, with that error pending, so the first call into the client here
        raises ``SystemError`` in its place: the pending error is raised instead, for ``_serve`` to translate
        (escaping as ``SystemError``, an abort by the brokers read as a crash of unknown cause)."""
        if error is None:
            return
        try:
            self._record_failure(error, message)
        except SystemError as failure:
            if isinstance(failure.__cause__, KafkaException):
                raise failure.__cause__ from None
            raise

    def _record_failure(self, error: KafkaError, message: Message) -> None:
        failure = self._failure(error, message)
        if failure is None:
            return
        with self._lock:
            self._failed += 1
            if len(self._failures) < 10:
                self._failures.append(failure)

    def _failure(self, error: KafkaError, message: Message) -> KafkaProduceError | None:
        """What a failed delivery means: None for a fence (raised, or ridden out, by the next send or flush) and
        for an aborted transaction's purged records (its abort's doing)."""
        topic = message.topic() or "?"
        partition = message.partition()
        offset = message.offset()
        transactions = self._transactions
        if transactions is not None and (transactions.fenced_by(error) is not None or error.code() in PURGED_CODES):
            return None
        kind = KafkaRecordTooLargeError if error.code() in _TOO_LARGE else KafkaProduceError
        size = len(message.value() or b"")
        return kind(self.system, topic, partition, offset, f"{error.str()} (record of {size} bytes)")

    def _source_failure(self, error: KafkaError, message: Message) -> KafkaProduceError | None:
        """``_failure`` for a counted source's delivery report, translating a pending fatal error as
        ``_on_delivery`` does."""
        try:
            return self._failure(error, message)
        except SystemError as failure:
            if isinstance(failure.__cause__, KafkaException):
                raise failure.__cause__ from None
            raise

    def _count_for(self, source: str) -> tuple[str | None, SourceDeliveries | None]:
        """``source`` and its count (made at its first send), now the last to send; (source, None) when the
        producer does not count."""
        deliveries = self._deliveries
        if deliveries is None:
            return (source, None)
        with self._lock:
            counted = deliveries.get(source)
            if counted is None:
                counted = deliveries[source] = SourceDeliveries(self._source_failure)
        self._counted = (source, counted)
        return self._counted

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        """Hand one message to librdkafka (it batches, sends and retries in the background).

        The hot path makes one positional ``produce`` call: librdkafka's keyword path (timestamp,
        headers) costs several times more, so it is taken only for envelopes that carry either.
        Everything else an envelope may ask for (a partition key, a timestamp, headers, a partition
        the topic lacks) and every failure are dealt with out of line, in ``_send_special``.
        """
        stream = envelope.system_stream
        last_stream, topic, count = self._last
        if stream is not last_stream:  # a task usually sends to one stream object: skip hashing it
            topic, count = self._targets.get(stream) or self._target(stream)  # fails when not started
            self._last = (stream, topic, count)
        transactions = self._transactions
        if transactions is not None and transactions.fenced is not None:
            self._ride_out(transactions.fenced, self._ride_out_deadline())
        counted_source, counted = self._counted
        if source is not counted_source:
            counted_source, counted = self._count_for(source)
        if counted is None:
            self._send_one(envelope, topic, count, None)
            if source is not self._last_source:  # after the produce: see ``_begin_flush``
                self._sent_by(source)
        else:
            counted.sent += 1  # before the produce: see ``deliveries``
            try:
                self._send_one(envelope, topic, count, counted.delivered)
            except BaseException:
                counted.sent -= 1
                raise
        self._unserved += 1
        if self._unserved >= SERVE_EVERY:
            self._unserved = 0
            self._serve(topic)

    def _send_one(
        self, envelope: OutgoingMessageEnvelope, topic: str, count: int, on_delivery: Callable[..., None] | None
    ) -> None:
        key = envelope.key
        partition = envelope.partition
        if (
            envelope.timestamp is not None
            or envelope.headers
            or (envelope.partition_key is not None and envelope.partition_key != key)
            or (partition is not None and not 0 <= partition < count)
        ):
            self._send_special(envelope, topic, count, on_delivery)
        else:
            try:
                self._produce(topic, envelope.message, key, -1 if partition is None else partition, on_delivery)
            except (BufferError, KafkaException, TypeError):
                self._send_special(envelope, topic, count, on_delivery)

    def send_batch(
        self, source: str, stream: SystemStream, messages: Sequence[bytes | None], keys: Sequence[bytes | None] | None
    ) -> None:
        """The hot path of ``send`` once per batch rather than per message: one positional ``produce`` per
        message and nothing else in Python; a message librdkafka refuses takes ``_send_special`` as in
        ``send``."""
        last_stream, topic, count = self._last
        if stream is not last_stream:
            topic, count = self._targets.get(stream) or self._target(stream)  # fails when not started
            self._last = (stream, topic, count)
        transactions = self._transactions
        if transactions is not None and transactions.fenced is not None:
            self._ride_out(transactions.fenced, self._ride_out_deadline())
        counted_source, counted = self._counted
        if source is not counted_source:
            counted_source, counted = self._count_for(source)
        produce = self._produce
        on_delivery = None if counted is None else counted.delivered
        for message, key in zip(messages, repeat(None) if keys is None else keys, strict=False):
            if counted is not None:
                counted.sent += 1
            try:
                produce(topic, message, key, -1, on_delivery)
            except (BufferError, KafkaException, TypeError):
                try:
                    self._send_special(OutgoingMessageEnvelope(stream, message, key), topic, count, on_delivery)
                except BaseException:
                    if counted is not None:
                        counted.sent -= 1
                    raise
        if counted is None and source is not self._last_source:
            self._sent_by(source)
        self._unserved += len(messages)
        if self._unserved >= SERVE_EVERY:
            self._unserved = 0
            self._serve(topic)

    def _send_special(
        self,
        envelope: OutgoingMessageEnvelope,
        topic: str,
        count: int,
        on_delivery: Callable[..., None] | None = None,
    ) -> None:
        producer = self._producer
        if producer is None:
            raise KafkaSystemError(f"the producer of Kafka system '{self.system}' is not started")
        key: Any = envelope.key
        value: Any = envelope.message
        partition = envelope.partition
        if partition is None:
            partition_key = envelope.partition_key
            if partition_key is None or partition_key == key:
                partition = -1
            else:
                partition = self._partition(topic, partition_key, count)
        elif not 0 <= partition < count:
            raise KafkaSystemError(
                f"Kafka topic '{topic}' has partitions 0..{count - 1}; an envelope asked for partition {partition}"
            )
        timestamp = envelope.timestamp
        headers: Any = envelope.headers
        while True:
            try:
                if timestamp is None and not headers:
                    producer.produce(topic, value, key, partition, on_delivery)
                else:
                    if timestamp is not None and timestamp <= 0:
                        raise self._unrepresentable_timestamp(topic, timestamp)
                    producer.produce(
                        topic, value, key, partition, on_delivery, timestamp=timestamp or 0, headers=headers or None
                    )
                if self._replay is not None:
                    self._replay.record(topic, value, key, partition, timestamp, headers or None)
                break
            except BufferError:
                self._make_room(producer, topic)
            except KafkaException as error:
                failure = self._produce_error(error, topic, partition, value)
                if not isinstance(failure, WriterFencedError) or self._replay is None:
                    raise failure from None
                self._ride_out(failure, self._ride_out_deadline())
                producer = self._producer
                assert producer is not None
            except TypeError:
                raise KafkaSystemError(
                    f"Kafka topic '{topic}': key and message must be bytes (serialized), got "
                    f"{type(key).__name__} and {type(value).__name__}"
                ) from None

    def _make_room(self, producer: Producer, topic: str) -> None:
        """The local queue is full: let librdkafka deliver some first (a flush serves callbacks, so it may raise
        a fatal error, translated as a produce error is)."""
        try:
            producer.flush(0.01)
        except KafkaException as error:
            raise self._produce_error(error, topic, None, None) from None

    def _unrepresentable_timestamp(self, topic: str, timestamp: int) -> KafkaSystemError:
        """librdkafka takes a timestamp of 0 to mean "now" and Kafka has none before 1970: writing either
        would silently move the record's event time to the present."""
        return KafkaSystemError(
            f"Kafka topic '{topic}': cannot write a record with timestamp {timestamp} ms: Kafka record timestamps "
            "start after the epoch (0 would be replaced by the current time); give event times after "
            "1970-01-01T00:00:00.001Z"
        )

    def _not_started(self, *args: Any) -> None:
        raise KafkaSystemError(f"the producer of Kafka system '{self.system}' is not started")

    def _target(self, stream: SystemStream) -> tuple[str, int]:
        if self._producer is None:
            self._not_started()
        if stream.system != self.system:
            raise KafkaSystemError(f"producer of Kafka system '{self.system}' cannot send to '{stream}'")
        target = (stream.stream, self._topic_partitions(stream.stream))
        self._targets[stream] = target
        return target

    @staticmethod
    def _partition(topic: str, partition_key: Any, count: int) -> int:
        if not isinstance(partition_key, _BYTES_LIKE):
            raise KafkaSystemError(
                f"Kafka topic '{topic}': the partition key must be bytes, got {type(partition_key).__name__}"
            )
        return partition_for_key(bytes(partition_key), count)

    def _produce_error(
        self, error: KafkaException, topic: str, partition: int | None, value: Any
    ) -> KafkaProduceError | WriterFencedError:
        """What a produce (or a poll) that raised means: the fence when a newer attempt took the transactional id,
        whichever call learnt it first, else a produce error naming the topic.

        librdkafka reports a fenced producer as a generic fatal error at ``produce``; the reason is raised by the
        next ``poll`` (there is no error callback), so it is read here rather than let out: escaping raw, it
        reached the process-error policy as the user's failure, with advice to skip or dead-letter."""
        inner = kafka_error(error)
        transactions = self._transactions
        if inner is not None and transactions is not None:
            if inner.code() == KafkaError._FATAL and self._producer is not None:
                try:
                    self._producer.poll(0)  # the fatal error that says why (a fenced producer) comes first
                except KafkaException as fatal:
                    inner = kafka_error(fatal) or inner
            if (fenced := transactions.fenced or transactions.fenced_by(inner)) is not None:
                return fenced
        detail = inner.str() if inner is not None else str(error)
        if inner is not None and inner.code() in _TOO_LARGE:
            size = len(value) if value is not None else 0
            return KafkaRecordTooLargeError(self.system, topic, partition, None, f"{detail}: a record of {size} bytes")
        return KafkaProduceError(self.system, topic, partition, None, detail)

    def _serve(self, topic: str) -> None:
        """Serve librdkafka's callbacks; the fatal error a poll raises (a fenced producer) is translated as a
        produce error is, so it is never mistaken for the user's."""
        try:
            self._poll(0)
        except KafkaException as error:
            failure = self._produce_error(error, topic, None, None)
            if not isinstance(failure, WriterFencedError) or self._replay is None:
                raise failure from None
            self._ride_out(failure, self._ride_out_deadline())

    def _topic_partitions(self, topic: str) -> int:
        assert self._producer is not None
        producer = self._producer
        timeout = self.kafka.settings.operation_timeout_ms / 1000
        metadata = retry(
            lambda: producer.list_topics(topic=topic, timeout=timeout),
            f"Kafka system '{self.system}': reading metadata of topic '{topic}'",
            self.kafka.settings.outage_timeout_ms / 1000,
            kafka=self.kafka,
        )
        count = topic_partitions(metadata, topic)
        if count is None:
            if not self._auto_create:
                raise StreamNotFoundError(
                    self.system,
                    topic,
                    "the Kafka topic does not exist: create it first or set "
                    f"'systems.{self.system}.auto.create.streams=true'",
                )
            admin = create_client(AdminClient, self.kafka.admin(), "admin", self.kafka)
            if create_topic(admin, self.kafka, topic, self._default_partitions, self._default_replication, {}):
                log.info("created Kafka topic %s with %d partition(s)", topic, self._default_partitions)
            return self._topic_partitions(topic)
        self._partition_counts[topic] = count
        return count

    def _sent_by(self, source: str) -> None:
        with self._lock:
            self._sent_since_flush.add(source)
            self._last_source = source

    def _begin_flush(self, source: str | None) -> set[str] | None:
        """The sources this flush covers (taken out of ``_sent_since_flush``), or None when ``source`` sent
        nothing since the last flush began: that flush covers all it sent. A send records its source after its
        produce, and a flush takes the sources before it waits, so a send the flush misses comes after it."""
        with self._lock:
            if source is not None and source not in self._sent_since_flush:
                return None
            covered, self._sent_since_flush = self._sent_since_flush, set()
            self._last_source = None
            return covered

    def _flush_failed(self, covered: set[str]) -> None:
        """The sources a failed flush covered still need theirs (which raises again if anything is lost)."""
        with self._lock:
            self._sent_since_flush |= covered
            self._last_source = None

    def flush(self, source: str) -> None:
        """Wait until everything ``source`` sent is acknowledged (see the module docstring: a transactional
        producer's, when it sent since the last flush began, waits for everything sent by every source); raise
        the first failure (``source``'s, when counted).

        librdkafka fails a message only after ``message.timeout.ms`` (default 5 minutes) of retries, so
        a broker that restarts meanwhile delays the flush but loses nothing.
        """
        deliveries = self._deliveries
        producer = self._producer
        if deliveries is None or producer is None:
            self._flush(source)
            return
        counted = deliveries.get(source)
        if counted is not None:
            if counted.outstanding > 0:
                self._await(lambda: self._poll_until_done(producer, counted), "of this source's ")
            self._raise_failures(counted)
        self._raise_failures()

    def _poll_until_done(self, producer: Producer, counted: SourceDeliveries) -> int:
        """One ``flush`` of up to ``SOURCE_WAIT_S`` unless ``counted`` is done; what it still waits for. A bounded
        flush rather than a ``poll``: it serves the delivery reports as a poll does, and makes librdkafka send
        what waits for ``linger.ms`` at once, which a poll does not."""
        if counted.outstanding > 0:
            try:
                producer.flush(SOURCE_WAIT_S)
            except KafkaException as error:
                raise self._produce_error(error, "*", None, None) from None
        return max(counted.outstanding, 0)

    def _flush(self, source: str | None) -> None:
        """``flush`` of ``source``, or of everything (None)."""
        producer = self._producer
        if producer is None:
            return
        covered = self._begin_flush(source)
        if covered is None:
            transactions = self._transactions
            if transactions is not None and transactions.fenced is not None:  # as a send would: ride it out
                self._ride_out(transactions.fenced, self._ride_out_deadline())
            self._raise_failures()
            return
        try:
            self._flush_covered(producer)
        except BaseException:
            self._flush_failed(covered)
            raise

    def _flush_covered(self, producer: Producer) -> None:
        self._unserved = 0
        if self._transactions is not None:
            if not self._commit_on_flush:
                try:
                    self._transactions.check()
                    self._await_deliveries(producer)  # durable, visible only once the container's commit ends it
                    self._transactions.check()
                except WriterFencedError as fenced:
                    raise self._unridden(fenced) from None
                return
            self._commit_riding_out(self._transactions)  # flushes, then commits: all sent is durable and visible
            self._raise_failures()
            return
        self._await_deliveries(producer)

    @property
    def transactional(self) -> bool:
        return self._transactions is not None and not self._commit_on_flush

    @property
    def flush_covers_every_source(self) -> bool:
        """True unless the sends are counted per source (``flush.per.source`` without a transaction): librdkafka
        flushes a whole producer, and a transaction's commit covers every source's sends."""
        return self._deliveries is None

    def commit_transaction(self) -> None:
        """Commit what was sent since the last commit and begin the next transaction (exactly-once)."""
        producer = self._producer
        if producer is None or self._transactions is None or self._commit_on_flush:
            return
        self._unserved = 0
        try:
            self._transactions.commit(producer)
        except WriterFencedError as fenced:
            raise self._unridden(fenced) from None
        self._raise_failures()

    def _await_deliveries(self, producer: Producer) -> None:
        """Wait until librdkafka has every message acknowledged (it retries them through broker restarts and
        network cuts); fails, naming the brokers, once none was acknowledged for ``outage.timeout.ms``."""
        self._await(lambda: self._flush_once(producer), "")
        for counted in list((self._deliveries or {}).values()):
            self._raise_failures(counted)
        self._raise_failures()

    def _await(self, wait_once: Callable[[], int], whose: str) -> None:
        """Call ``wait_once`` (which waits a little, returning the messages still unacknowledged) until none is
        left; fail, naming the brokers, once none was acknowledged for ``outage.timeout.ms``."""
        stall_s = self.kafka.settings.outage_timeout_ms / 1000
        waited = progressed = time.monotonic()
        remaining = None
        while (left := wait_once()) > 0:
            now = time.monotonic()
            if remaining is None or left < remaining:
                remaining, progressed = left, now
            elif now - progressed >= stall_s:
                raise KafkaProduceError(
                    self.system, "*", None, None,
                    f"flushing failed: {left} message(s) {whose}not acknowledged by the brokers at "
                    f"{self.kafka.bootstrap_servers}, none for {self._deadline_text()}",
                )  # fmt: skip
            if now - waited > 30:
                log.warning("Kafka system '%s': %d message(s) %snot acknowledged yet", self.system, left, whose)
                waited = now

    def _flush_once(self, producer: Producer) -> int:
        """One ``flush`` of up to a second; the fatal error it may raise (a fenced producer) is translated as a
        produce error is, so a transaction the brokers aborted is never reported as a raw client error."""
        try:
            return int(producer.flush(1.0))
        except KafkaException as error:
            raise self._produce_error(error, "*", None, None) from None

    def _raise_failures(self, counted: SourceDeliveries | None = None) -> None:
        """Raise the first failure recorded since the last call (of ``counted``'s source, or of the messages
        sent without a count), naming how many more failed."""
        if counted is not None:
            failures, failed = counted.take_failures()
        else:
            with self._lock:
                failures, self._failures = self._failures, []
                failed, self._failed = self._failed, 0
        if failures:
            first = failures[0]
            if failed > 1:
                first.args = (f"{first.args[0]} (and {failed - 1} more failed message(s))",)
            raise first

    def stop(self) -> None:
        """Flush everything, then release the producer (even when the flush fails). A producer whose
        transactions the container's commit ends aborts the open one instead: what it holds was not
        committed with a checkpoint, so it must never become visible."""
        try:
            if self._transactions is not None and not self._commit_on_flush and self._producer is not None:
                self._transactions.abort(self._producer)
            else:
                self._flush(None)
        finally:
            self._producer = None
            self._replay = None
            self._produce = self._poll = self._not_started
            self._last = (None, "", 0)

    def partition_count(self, topic: str) -> int:
        """The partition count this producer uses for ``topic`` (fetched once per topic)."""
        return self._partition_counts.get(topic) or self._topic_partitions(topic)

    # --- riding out transactions the brokers aborted (at-least-once) ----------------------------------------

    def _ride_out_deadline(self) -> float:
        return time.monotonic() + self.kafka.settings.outage_timeout_ms / 1000

    def _commit_riding_out(self, transactions: ProducerTransactions) -> None:
        """Commit the open transaction; one the brokers aborted or fenced while this attempt is still the
        container's current one is sent again (``TransactionReplay``) and committed, until
        ``systems.<s>.outage.timeout.ms`` has passed."""
        deadline = self._ride_out_deadline()
        while True:
            try:
                if transactions.fenced is not None:
                    raise transactions.fenced
                assert self._producer is not None
                transactions.commit(self._producer)
            except (WriterFencedError, KafkaTransactionAbortedError) as lost:
                self._ride_out(lost, deadline)
                continue
            if self._replay is not None:
                self._replay.committed()
            return

    def _ride_out(self, lost: WriterFencedError | KafkaTransactionAbortedError, deadline: float) -> None:
        """Carry on after the brokers aborted the open transaction: in a new transaction (of a new producer
        with the same transactional id when the brokers fenced this one), send its records again. Raises
        ``lost`` as it is when it cannot: a newer attempt exists (then the fence is real), or no records are
        kept (exactly-once, where the container's next attempt reprocesses the input instead); and an error
        naming the brokers past the deadline."""
        transactions = self._transactions
        replay = self._replay
        if transactions is None or replay is None:
            raise self._unridden(lost) from None
        cause = f"fenced: {transactions.fence_detail}" if isinstance(lost, WriterFencedError) else str(lost)
        if time.monotonic() >= deadline:
            raise KafkaProduceError(
                self.system, "*", None, None,
                f"the container's transaction could not be committed within {self._deadline_text()} at brokers "
                f"{self.kafka.bootstrap_servers}: {cause}",
            ) from lost  # fmt: skip
        usable = isinstance(lost, KafkaTransactionAbortedError) and lost.producer_usable
        if not usable:
            if not self._is_current():
                raise self._real_fence(lost) from None
            self._replace_producer(transactions)
        assert self._producer is not None
        with self._lock:
            self._failures, self._failed = [], 0  # the aborted transaction's: its records are sent again
        sent = replay.replay(self._producer, lambda producer: self._make_room(producer, "*"))
        log.warning(
            "Kafka system '%s' transactional.id %s: the brokers aborted the open transaction (%s); no newer attempt "
            "exists, so its %d record(s) are sent again in a new transaction%s",
            self.system, transactions.transactional_id, cause, sent, "" if usable else " of a new producer",
        )  # fmt: skip

    def _unridden(self, lost: WriterFencedError | KafkaTransactionAbortedError) -> KafkaProduceError | FencedError:
        """Exactly-once: the aborted transaction held output and checkpoints, whose input the container's next
        attempt processes again from the last checkpoint; a fence by the brokers must not read as a newer
        attempt's, though, which stops the container as a zombie's."""
        transactions = self._transactions
        if transactions is None or not isinstance(lost, WriterFencedError) or not self._is_current():
            return lost
        return KafkaTransactionAbortedError(
            self.system,
            transactions.transactional_id,
            f"the brokers fenced the producer ({transactions.fence_detail}) although no newer attempt exists (a "
            "broker restart or the transaction's timeout); under exactly-once the container's next attempt "
            "processes the transaction's input again from its last checkpoint",
            producer_usable=False,
        )

    def _replace_producer(self, transactions: ProducerTransactions) -> None:
        """A new producer takes over the transactional id; checked again afterwards, so that a newer attempt
        that started meanwhile is never overtaken: its own producer fenced ours, or will once it starts."""
        producer = create_client(Producer, self._settings, "producer", self.kafka)
        transactions.replace(producer)
        self._use(producer)
        if not self._is_current():
            transactions.abort(producer)
            raise self._real_fence(None)

    def _is_current(self) -> bool:
        """Whether the metadata store still names this producer's writer (False when it cannot be asked)."""
        writer = self._writer
        return writer is not None and self._writer_current is not None and self._writer_current(writer)

    def _real_fence(self, lost: BaseException | None) -> WriterFencedError:
        transactions = self._transactions
        assert transactions is not None and self._writer is not None
        if isinstance(lost, WriterFencedError):
            return lost
        detail = f"a newer attempt is recorded in the metadata store ({lost})" if lost else "a newer attempt started"
        fenced = WriterFencedError(f"Kafka system '{self.system}' transactional.id {transactions.transactional_id}",
                                   self._writer, detail)  # fmt: skip
        transactions.fenced = fenced
        return fenced

    def _deadline_text(self) -> str:
        return f"{self.kafka.settings.outage_timeout_ms} ms (systems.{self.system}.outage.timeout.ms)"

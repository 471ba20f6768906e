"""Reads registered Kafka partitions from given offsets, with one librdkafka consumer per container.

Partitions are *assigned*, never subscribed: the JobModel decides which container reads which
partition, so there is no consumer-group membership, no rebalancing and no offset commit to Kafka
(``enable.auto.commit=false``); where a task resumes is its checkpoint.

librdkafka returns messages of every assigned partition from one queue, while the run loop asks for
some partitions at a time (it holds back partitions whose previous batch is still being processed).
Messages of partitions not asked for wait in a per-partition buffer; a partition whose buffer
reaches ``task.consumer.buffer.size`` is paused in librdkafka (which then stops fetching it) and
resumed once the buffer is drained: backpressure without unbounded memory.

Envelopes carry ``str`` offsets, bytes keys and values (None where none was written), the record's
timestamp (ms) and its headers as a dict (a repeated header name keeps its last value). Kafka has
no end of stream: a partition is unbounded and never yields an end-of-stream envelope.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Set
from itertools import groupby, repeat
from operator import attrgetter, itemgetter
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from millstream.connectors.kafka.client import check_brokers, create_client, parse_offset, topic_partitions
from millstream.connectors.kafka.config import KafkaClientSettings
from millstream.connectors.kafka.errors import (
    KafkaConsumeError,
    KafkaOffsetOutOfRangeError,
    KafkaSystemError,
)
from millstream.contracts.systems import SystemConsumer
from millstream.errors import StreamNotFoundError
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition

log = logging.getLogger(__name__)

_PARTITION_FATAL = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.OFFSET_OUT_OF_RANGE,
    }
)
WARN_INTERVAL_S = 10.0
_error = Message.error
_topic = Message.topic
_partition = Message.partition
_offset = Message.offset
_key = Message.key
_value = Message.value
_headers = Message.headers
_timestamp = Message.timestamp
_second = itemgetter(1)
_ssp_of = attrgetter("ssp")


class KafkaSystemConsumer(SystemConsumer):
    """``SystemConsumer`` of a Kafka system; one thread at a time (the container's run loop)."""

    def __init__(
        self, system: str, kafka: KafkaClientSettings, *, batch_size: int = 10_000, buffer_size: int = 10_000
    ) -> None:
        self.system = system
        self.kafka = kafka
        self.batch_size = batch_size
        self.buffer_size = buffer_size
        self._offsets: dict[SystemStreamPartition, int] = {}
        self._consumer: Consumer | None = None
        self._lookup: dict[tuple[str, int], SystemStreamPartition] = {}
        self._by_partition: dict[int, SystemStreamPartition] | None = None
        """When every partition is of one topic, found by partition number alone (one call less)."""
        self._buffers: dict[SystemStreamPartition, list[IncomingMessageEnvelope]] = {}
        self._paused: set[SystemStreamPartition] = set()
        self._last_warning = 0.0

    def register(self, ssp: SystemStreamPartition, offset: str) -> None:
        """Read ``ssp`` from ``offset`` (inclusive); registering it again keeps the earlier offset."""
        if ssp.system != self.system:
            raise KafkaSystemError(f"consumer of Kafka system '{self.system}' cannot read {ssp}")
        if self._consumer is not None:
            raise KafkaSystemError(f"cannot register {ssp} after the consumer of system '{self.system}' started")
        position = parse_offset(ssp.stream, ssp.partition, offset)
        current = self._offsets.get(ssp)
        self._offsets[ssp] = position if current is None else min(current, position)

    def start(self) -> None:
        """Connect (failing within ``startup.timeout.ms`` when no broker answers), check that every
        registered topic and partition exists, and assign them at their offsets."""
        consumer = create_client(Consumer, self.kafka.consumer(), "consumer", self.kafka)
        try:
            metadata = check_brokers(consumer, self.kafka)
            for ssp in sorted(self._offsets):
                count = topic_partitions(metadata, ssp.stream)
                if count is None:
                    raise StreamNotFoundError(self.system, ssp.stream, "the Kafka topic does not exist")
                if ssp.partition >= count:
                    raise KafkaSystemError(
                        f"Kafka topic '{ssp.stream}' has partitions 0..{count - 1}; "
                        f"cannot read partition {ssp.partition}"
                    )
            consumer.assign([TopicPartition(s.stream, s.partition, o) for s, o in sorted(self._offsets.items())])
        except BaseException:
            consumer.close()
            raise
        self._lookup = {(ssp.stream, ssp.partition): ssp for ssp in self._offsets}
        topics = {ssp.stream for ssp in self._offsets}
        self._by_partition = {ssp.partition: ssp for ssp in self._offsets} if len(topics) == 1 else None
        self._buffers = {ssp: [] for ssp in self._offsets}
        self._consumer = consumer

    def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()
        self._buffers.clear()
        self._paused.clear()

    def poll(
        self, ssps: Set[SystemStreamPartition], timeout: float
    ) -> dict[SystemStreamPartition, list[IncomingMessageEnvelope]]:
        """What is buffered or fetched for ``ssps``; waits up to ``timeout`` only when there is nothing.

        ``Consumer.consume(n, t)`` waits the whole ``t`` unless ``n`` messages arrive, so a wait asks
        for one message and the rest of the batch is then taken without waiting.
        """
        consumer = self._consumer
        if consumer is None:
            raise KafkaSystemError(f"the consumer of Kafka system '{self.system}' is not started")
        result: dict[SystemStreamPartition, list[IncomingMessageEnvelope]] = {}
        buffers = self._buffers
        for ssp in ssps:
            buffered = buffers.get(ssp)
            if buffered is None:
                raise KafkaSystemError(f"{ssp} was not registered with the consumer of system '{self.system}'")
            if buffered:
                result[ssp] = buffered
                buffers[ssp] = []
        collecting = gc.isenabled()
        if collecting:
            gc.disable()
        try:
            messages = consumer.consume(self.batch_size, 0)
            if not messages and not result and timeout > 0:
                if collecting:
                    gc.enable()  # not while waiting: another thread may allocate meanwhile
                messages = consumer.consume(1, timeout)
                if collecting:
                    gc.disable()
                if messages and self.batch_size > 1:
                    messages.extend(consumer.consume(self.batch_size - 1, 0))
            fetched = bool(messages)
            if fetched:
                self._build(messages, ssps, result)
            del messages  # freed before the collector runs again, which then has only the envelopes to walk
        finally:
            if collecting:
                gc.enable()
        if fetched:
            self._pause_full()
        if self._paused:
            self._resume_drained()
        return result

    def _pause_full(self) -> None:
        for ssp, buffered in self._buffers.items():
            if len(buffered) >= self.buffer_size and ssp not in self._paused:
                self._pause(ssp)

    def _build(
        self,
        messages: list[Message],
        wanted: Set[SystemStreamPartition],
        result: dict[SystemStreamPartition, list[IncomingMessageEnvelope]],
    ) -> None:
        """Turn librdkafka's messages into envelopes, in order, into ``result`` or the partition's buffer.

        The envelopes are built column by column with ``map`` over ``Message``'s own methods, as the log
        consumer builds its batches, so the per-message work stays in C apart from the envelope's
        ``__init__``; librdkafka hands a partition's messages over in runs, and each run is moved to
        its partition's list whole. The caller pauses the cyclic garbage collector meanwhile: the
        ``Message`` objects and the envelopes are container objects, and a running collector would walk
        the young generation many times per batch for nothing (neither holds cycles).
        """
        if any(map(_error, messages)):
            messages = self._without_errors(messages)
            if not messages:
                return
        count = len(messages)
        by_partition: Any = self._by_partition
        lookup: Any = self._lookup
        ssps: Any
        if by_partition is not None:
            ssps = map(by_partition.__getitem__, map(_partition, messages))
        else:
            ssps = map(lookup.__getitem__, zip(map(_topic, messages), map(_partition, messages), strict=True))
        values: Any = list(map(_value, messages))
        pairs: Any = list(map(_headers, messages))
        headers: Any = [dict(each) if each else None for each in pairs] if any(pairs) else repeat(None, count)
        try:
            sizes: Any = list(map(len, values))
        except TypeError:  # a value is None (a tombstone), which len refuses
            sizes = [0 if value is None else len(value) for value in values]
        envelopes = map(
            IncomingMessageEnvelope,
            ssps,
            map(repr, map(_offset, messages)),  # an int's repr is its str, and a cheaper call
            map(_key, messages),
            values,
            map(_second, map(_timestamp, messages)),
            headers,
            sizes,
        )
        buffers = self._buffers
        for ssp, run in groupby(envelopes, _ssp_of):
            (result.setdefault(ssp, []) if ssp in wanted else buffers[ssp]).extend(run)

    def _without_errors(self, messages: list[Message]) -> list[Message]:
        """The messages that carry data; the errors among them are dealt with (``_on_error``) in order."""
        kept = []
        for message in messages:
            error = message.error()
            if error is None:
                kept.append(message)
            else:
                self._on_error(message, error)
        return kept

    def _pause(self, ssp: SystemStreamPartition) -> None:
        assert self._consumer is not None
        self._consumer.pause([TopicPartition(ssp.stream, ssp.partition)])
        self._paused.add(ssp)
        log.debug("paused %s: %d messages buffered", ssp, len(self._buffers[ssp]))

    def _resume_drained(self) -> None:
        assert self._consumer is not None
        drained = [ssp for ssp in self._paused if len(self._buffers[ssp]) < self.buffer_size // 2]
        if drained:
            self._consumer.resume([TopicPartition(ssp.stream, ssp.partition) for ssp in drained])
            self._paused.difference_update(drained)

    def _on_error(self, message: Message, error: KafkaError) -> None:
        """Partition errors that cannot heal fail the container; transient ones are librdkafka's to retry."""
        code = error.code()
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if code == KafkaError._PARTITION_EOF:
            return
        if code == KafkaError._AUTO_OFFSET_RESET or code == KafkaError.OFFSET_OUT_OF_RANGE:
            raise KafkaOffsetOutOfRangeError(self.system, topic or "?", partition or 0, offset, error.str())
        if error.fatal() or (code in _PARTITION_FATAL and topic):
            raise KafkaConsumeError(self.system, topic or "?", partition or 0, offset, error.str())
        now = time.monotonic()
        if now - self._last_warning >= WARN_INTERVAL_S:
            self._last_warning = now
            log.warning("Kafka system '%s': %s (retrying)", self.system, error.str())

    def position(self, ssp: SystemStreamPartition) -> str | None:
        """librdkafka's position past what it handed over (control records and aborted transactions
        included), once nothing of ``ssp`` waits in this consumer's buffer."""
        if self._consumer is None or self._buffers.get(ssp):
            return None
        (position,) = self._consumer.position([TopicPartition(ssp.stream, ssp.partition)])
        return str(position.offset) if position.offset >= 0 else None

    def positions(self) -> dict[SystemStreamPartition, Any]:
        """librdkafka's fetch position of each partition (for tools and tests)."""
        if self._consumer is None:
            return {}
        return {
            self._lookup[(tp.topic, tp.partition)]: tp.offset
            for tp in self._consumer.position([TopicPartition(s.stream, s.partition) for s in self._offsets])
        }

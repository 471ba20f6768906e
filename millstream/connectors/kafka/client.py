"""Creating librdkafka clients and talking to the brokers with bounded waits.

Every client a Kafka system, the Kafka checkpoint manager or the Kafka metadata store creates goes
through :func:`create_client` (a refused setting becomes a ``ConfigError`` naming the config key,
without secret values) and checks the brokers with :func:`check_brokers`, so an unreachable cluster
fails within ``systems.<s>.startup.timeout.ms`` with the bootstrap servers in the message instead of
hanging in librdkafka's reconnect loop.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition, TopicPartitionInfo
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

from millstream.connectors.kafka.config import KafkaClientSettings
from millstream.connectors.kafka.errors import (
    KafkaBrokersUnreachableError,
    KafkaClientConfigError,
    KafkaOffsetError,
    KafkaSystemError,
)

log = logging.getLogger(__name__)

Client = TypeVar("Client")
_PROPERTY = re.compile(r'property:? "(?P<key>[^"]+)"')

RETRIABLE_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._WAIT_COORD,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.CONCURRENT_TRANSACTIONS,
        KafkaError.KAFKA_STORAGE_ERROR,
    }
)

PURGED_CODES = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
"""Delivery failures of the records an aborted transaction held (aborted by the producer, or by librdkafka when the
transaction failed, as after a broker restart): the abort's doing, not the records'."""


def kafka_error(error: BaseException) -> KafkaError | None:
    """The ``KafkaError`` inside a ``KafkaException`` (or None for anything else)."""
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return error.args[0]
    return None


def is_retriable(error: BaseException) -> bool:
    """A transient condition (broker down or moving, request timed out, no leader yet) worth retrying."""
    inner = kafka_error(error)
    if inner is None:
        return False
    if inner.code() == KafkaError._NOENT and "leader" in inner.str().lower():
        return True  # ListOffsets: "Failed to query partition leaders: No leaders found" while brokers are away
    return bool(inner.retriable()) or inner.code() in RETRIABLE_CODES


def create_client(
    factory: Callable[[dict[str, Any]], Client], settings: dict[str, Any], client: str, kafka: KafkaClientSettings
) -> Client:
    """Construct a librdkafka client; a setting it refuses is a ``ConfigError`` naming the config key."""
    try:
        return factory(settings)
    except (KafkaException, ValueError, TypeError) as error:
        inner = kafka_error(error)
        text = kafka.redact(inner.str() if inner is not None else str(error))
        match = _PROPERTY.search(text)
        where = (
            f"config key '{kafka.key_of(client, match['key'])}'"
            if match
            else f"the settings under 'systems.{kafka.system}.{client}.*'"
        )
        raise KafkaClientConfigError(f"Kafka system '{kafka.system}': {where} refused by librdkafka: {text}") from None


_REACHED: set[str] = set()
"""Bootstrap server lists some client of this process has reached (a set's add and ``in`` are atomic)."""


def check_brokers(handle: Any, kafka: KafkaClientSettings, timeout_s: float | None = None) -> ClusterMetadata:
    """Cluster metadata from ``handle``; fails when no broker answers in time.

    Brokers this process never reached get ``timeout_s`` (default ``systems.<s>.startup.timeout.ms``): a wrong
    address or a firewall fails fast, naming the bootstrap servers. Brokers some client of this process has
    reached before are in an outage, not misconfigured: a client created then (a container's admin created at
    its first commit, a container attempt started again in the same worker) waits for them up to
    ``systems.<s>.outage.timeout.ms``, as the calls on the run and commit paths do, so an outage shorter than
    that costs no container failure."""
    first_contact = timeout_s if timeout_s is not None else kafka.settings.startup_timeout_ms / 1000
    known = timeout_s is None and kafka.bootstrap_servers in _REACHED
    limit = kafka.settings.outage_timeout_ms / 1000 if known else first_contact
    started = time.monotonic()
    warned = False
    while True:
        remaining = limit - (time.monotonic() - started)
        try:
            metadata = handle.list_topics(timeout=max(min(first_contact, remaining), 0.001))
        except KafkaException as error:
            inner = kafka_error(error)
            detail = kafka.redact(inner.str() if inner is not None else str(error))
            waited = time.monotonic() - started
            if known and waited < limit:  # brokers this process reached before, still away
                if not warned:
                    warned = True
                    log.warning(
                        "Kafka system '%s': no broker at %s answers (%s); this process reached them before, so it "
                        "waits up to %gs (systems.%s.outage.timeout.ms)",
                        kafka.system, kafka.bootstrap_servers, detail, limit, kafka.system,
                    )  # fmt: skip
                time.sleep(min(0.5, limit - waited))  # a refused connection fails at once: do not spin
                continue
            raise KafkaBrokersUnreachableError(
                kafka.system, kafka.bootstrap_servers, limit, detail, outage=known
            ) from None
        _REACHED.add(kafka.bootstrap_servers)
        return metadata


def retry(
    action: Callable[[], Client],
    what: str,
    timeout_s: float,
    *,
    on_retry: Callable[[BaseException], None] | None = None,
    kafka: KafkaClientSettings | None = None,
) -> Client:
    """Run ``action`` until it succeeds, retrying transient Kafka errors with backoff for ``timeout_s``
    (``systems.<s>.outage.timeout.ms`` on the run and commit paths): a broker restart or a network cut shorter
    than that is ridden out. Past it, or at an error that is not transient, raises ``KafkaSystemError`` naming
    ``what`` was done, the brokers (given ``kafka``) and how long it was retried."""
    started = time.monotonic()
    deadline = started + timeout_s
    backoff = 0.05
    while True:
        try:
            return action()
        except KafkaException as error:
            retriable = is_retriable(error)
            if not retriable or time.monotonic() + backoff > deadline:
                inner = kafka_error(error)
                detail = inner.str() if inner is not None else str(error)
                where = f" at brokers {kafka.bootstrap_servers}" if kafka is not None else ""
                if retriable:
                    key = f"systems.{kafka.system}.outage.timeout.ms" if kafka is not None else "its deadline"
                    detail += f" (retried for {time.monotonic() - started:.1f}s, {key}={timeout_s * 1000:.0f})"
                raise KafkaSystemError(f"{what} failed{where}: {detail}") from None
            if on_retry is not None:
                on_retry(error)
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)


def future_result(future: Any, timeout_s: float, what: str) -> Any:
    """``future.result`` of an admin request; no answer within ``timeout_s`` is a retriable ``_TIMED_OUT``
    ``KafkaException`` naming ``what`` (as librdkafka's own request timeout is), never a bare ``TimeoutError``
    that :func:`retry` would not ride out and that names nothing."""
    try:
        return future.result(timeout=timeout_s)
    except TimeoutError:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"no answer {what} in {timeout_s:g} s")) from None


NO_OFFSET_FOR_TIMESTAMP = -1
"""ListOffsets by time: no record at or after the timestamp (Kafka's answer, not a failure)."""


def listed_offset(topic: str, partition: int, info: Any, *, by_timestamp: bool = False) -> int:
    """The offset in one partition's ListOffsets answer, or a retriable ``KafkaException`` when it holds none.

    librdkafka resolves a ListOffsets future whose request timed out with offset -1001 (``OFFSET_INVALID``)
    instead of an error. Taken as an offset it reads as "the partition is empty" (start >= end), and a
    changelog snapshot, a checkpoint read or a startpoint built on it is silently wrong. Only a by-time
    lookup may answer -1 (no record that late); every other negative offset is the missing answer it is."""
    offset = int(info.offset)
    if offset >= 0 or (by_timestamp and offset == NO_OFFSET_FOR_TIMESTAMP):
        return offset
    raise KafkaException(
        KafkaError(
            KafkaError._TIMED_OUT,
            f"no offset for {topic} partition {partition} in the broker's answer (got {offset}: the request "
            "timed out or the partition has no leader)",
        )
    )


def parse_offset(topic: str, partition: int, offset: str) -> int:
    try:
        value = int(offset)
    except (TypeError, ValueError):
        raise KafkaOffsetError(topic, partition, offset) from None
    if value < 0:
        raise KafkaOffsetError(topic, partition, offset)
    return value


def topic_partitions(metadata: ClusterMetadata, topic: str) -> int | None:
    """The partition count of ``topic``, or None when the cluster has no such topic."""
    info = metadata.topics.get(topic)
    if info is None or (info.error is not None and info.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
        return None
    return len(info.partitions)


def describe_partitions(
    admin: AdminClient, topics: Collection[str], timeout_s: float
) -> dict[str, list[TopicPartitionInfo] | None]:
    """Each of ``topics``' partitions (None: the cluster has no such topic), from the Admin API's DescribeTopics.

    Not from ``list_topics(topic=...)``: that makes librdkafka keep the topic's partitions in the client, and
    to librdkafka an admin client is a producer, whose broker thread walks every partition it keeps each time
    it serves a request. A container's admin answers each commit's offset questions (ListOffsets), so a
    1,000-partition changelog made every answer walk 1,000 partitions: work of tasks x requests."""
    futures = admin.describe_topics(TopicCollection(list(topics)), request_timeout=timeout_s)
    return {topic: _described(topic, future, timeout_s) for topic, future in futures.items()}


def _described(topic: str, future: Any, timeout_s: float) -> list[TopicPartitionInfo] | None:
    """One topic's DescribeTopics answer."""
    try:
        return list(future_result(future, timeout_s, f"describing topic '{topic}'").partitions)
    except KafkaException as error:
        inner = kafka_error(error)
        if inner is None or inner.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise
        return None


def create_topic(
    admin: AdminClient,
    kafka: KafkaClientSettings,
    topic: str,
    partitions: int,
    replication_factor: int,
    config: Mapping[str, str],
) -> bool:
    """Create ``topic`` and wait until the cluster serves it; False when it already existed."""
    timeout = kafka.settings.operation_timeout_ms / 1000
    new = NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor, config=dict(config))
    try:
        future_result(admin.create_topics([new], request_timeout=timeout)[topic], timeout, f"creating topic '{topic}'")
    except KafkaException as error:
        inner = kafka_error(error)
        if inner is not None and inner.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        detail = inner.str() if inner is not None else str(error)
        raise KafkaSystemError(
            f"Kafka system '{kafka.system}': cannot create topic '{topic}' ({partitions} partitions, "
            f"replication factor {replication_factor}, config {dict(config)}): {detail}"
        ) from None
    wait_for_topic(admin, kafka, topic, present=True)
    return True


def wait_for_topic(admin: AdminClient, kafka: KafkaClientSettings, topic: str, *, present: bool) -> None:
    """Wait until metadata shows ``topic`` with a leader for every partition (or shows it gone)."""
    deadline = time.monotonic() + kafka.settings.operation_timeout_ms / 1000
    while True:
        partitions = describe_partitions(admin, [topic], max(0.5, deadline - time.monotonic()))[topic]
        if partitions is None:
            if not present:
                return
        elif present and all(p.leader is not None and p.leader.id >= 0 for p in partitions):
            return
        if time.monotonic() >= deadline:
            state = "appear" if present else "disappear"
            raise KafkaSystemError(f"Kafka system '{kafka.system}': topic '{topic}' did not {state} in time")
        time.sleep(0.05)


def tp(topic: str, partition: int, offset: int | None = None) -> TopicPartition:
    return TopicPartition(topic, partition) if offset is None else TopicPartition(topic, partition, offset)

"""Builds a Kafka system's admin, consumers and producers from ``systems.<s>.*``."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from millstream.checkpoint.base import WriterFence
from millstream.config.settings import Settings
from millstream.connectors.kafka.admin import KafkaSystemAdmin
from millstream.connectors.kafka.config import CLIENT_PREFIXES, KafkaClientSettings, config_keys
from millstream.connectors.kafka.consumer import KafkaSystemConsumer
from millstream.connectors.kafka.partitioner import partition_for_key
from millstream.connectors.kafka.producer import KafkaSystemProducer
from millstream.contracts.systems import SystemContext, SystemFactory, WriterToken
from millstream.errors import ConfigError


class KafkaSystemFactory(SystemFactory):
    """``systems.<s>.samza.factory=kafka`` (or Samza's ``org.apache.samza.system.kafka.KafkaSystemFactory``).

    Accepts millstream's keys (``bootstrap.servers``, ``auto.create.streams``...) and hands every key
    under ``consumer.``, ``producer.`` and ``admin.`` to librdkafka unchecked.
    """

    config_keys: ClassVar[frozenset[str] | None] = config_keys()
    open_prefixes: ClassVar[tuple[str, ...]] = CLIENT_PREFIXES

    def key_partitioner(self) -> Callable[[bytes, int], int]:
        """murmur2 as librdkafka's ``murmur2_random`` and the Java client apply it to a keyed record."""
        return partition_for_key

    def get_admin(self, system_name: str, config: Settings) -> KafkaSystemAdmin:
        return KafkaSystemAdmin(system_name, KafkaClientSettings(config, system_name), config=config)

    def get_consumer(self, system_name: str, config: Settings) -> KafkaSystemConsumer:
        kafka = KafkaClientSettings(config, system_name)
        return KafkaSystemConsumer(
            system_name,
            kafka,
            batch_size=kafka.settings.poll_batch_size,
            buffer_size=config.task.max_buffered_per_partition,
        )

    def get_producer(self, system_name: str, config: Settings) -> KafkaSystemProducer:
        kafka = KafkaClientSettings(config, system_name)
        return KafkaSystemProducer(
            system_name,
            kafka,
            auto_create_streams=kafka.settings.auto_create_streams,
            default_partitions=kafka.settings.default_partitions,
            default_replication_factor=kafka.settings.default_replication_factor,
            transactional=kafka.settings.transactional_writes,
            flush_per_source=kafka.settings.flush_per_source,
            transaction_timeout_ms=producer_transaction_timeout_ms(kafka, config.task.commit_ms),
            commit_on_flush=not config.task.exactly_once,
            writer_current=lambda writer: writer_is_current(self.context, writer),
        )

    def transactional(self, system_name: str, config: Settings) -> bool:
        return KafkaClientSettings(config, system_name).settings.transactional_writes


def writer_is_current(context: SystemContext, writer: WriterToken) -> bool:
    """Whether the job's metadata store still names ``writer``'s generation and attempt: asked only after the
    brokers fenced or aborted a transaction, to tell a broker restart (ridden out) from a newer attempt. Asked
    rarely and from the producer's caller, so through a connection of its own, opened for the question."""
    store = context.open_metadata_store()
    store.init()
    try:
        return WriterFence(writer.generation, writer.container_id, writer.epoch).is_current(store)
    finally:
        store.close()


MAX_TRANSACTION_TIMEOUT_MS = 900_000
"""The brokers' default ``transaction.max.timeout.ms``: a producer asking for more is refused."""


def producer_transaction_timeout_ms(kafka: KafkaClientSettings, commit_ms: int) -> int:
    """``systems.<s>.producer.transaction.timeout.ms`` when set (handed to librdkafka as every ``producer.`` key
    is, so the pooled producer must not override it), else ``transaction_timeout_ms(commit_ms)``."""
    configured = kafka.producer().get("transaction.timeout.ms")
    if configured is None:
        return transaction_timeout_ms(commit_ms)
    if commit_ms > 0 and int(configured) <= commit_ms:
        raise ConfigError(
            f"config key 'systems.{kafka.system}.producer.transaction.timeout.ms' ({configured}) must exceed "
            f"task.commit.ms ({commit_ms}): a container's transaction stays open from one commit to the next, and "
            "the brokers would abort a live container's transactions"
        )
    return int(configured)


def transaction_timeout_ms(commit_ms: int) -> int:
    """A container's transaction stays open from one commit to the next: the broker must not abort it as timed
    out meanwhile (librdkafka's default, 60 s, equals the default ``task.commit.ms``). Three commit intervals,
    at least a minute, at most what brokers accept by default."""
    return max(60_000, min(3 * commit_ms, MAX_TRANSACTION_TIMEOUT_MS))

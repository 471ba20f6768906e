"""Builds the embedded log's admin, consumers and producers from ``systems.<s>.*``."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from millstream.config.settings import Settings
from millstream.contracts.systems import FileBudget, SystemFactory
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.config import LogSystemConfig, config_keys
from millstream.embedded.log.consumer import LogSystemConsumer
from millstream.embedded.log.layout import LogLayout
from millstream.embedded.log.open_files import PoolBounds, pool_bounds
from millstream.embedded.log.partitioner import partition_for_key
from millstream.embedded.log.producer import LogSystemProducer
from millstream.errors import ConfigError


def bounds(settings: LogSystemConfig) -> PoolBounds:
    """The pools' bounds: the keys set, else shares of the hard open-file limit (``open_files``)."""
    return pool_bounds(
        settings.admin_open_partitions_max, settings.consumer_open_partitions_max, settings.producer_open_partitions_max
    )


class LogSystemFactory(SystemFactory):
    """``millstream.embedded.log.factory:LogSystemFactory``, the factory of the default ``log`` system."""

    config_keys: ClassVar[frozenset[str] | None] = config_keys()

    def key_partitioner(self) -> Callable[[bytes, int], int]:
        return partition_for_key

    def get_admin(self, system_name: str, config: Settings) -> LogSystemAdmin:
        settings = config.view(LogSystemConfig, system_name)
        return LogSystemAdmin(
            system_name,
            LogLayout(settings.root(config), system_name),
            fsync=settings.fsync,
            retention_ms=settings.retention_ms,
            max_open_partitions=bounds(settings).admin,
        )

    def get_consumer(self, system_name: str, config: Settings) -> LogSystemConsumer:
        settings = config.view(LogSystemConfig, system_name)
        return LogSystemConsumer(
            system_name,
            LogLayout(settings.root(config), system_name),
            batch_size=settings.poll_batch_size,
            fsync=settings.fsync,
            open_max=bounds(settings).consumer,
        )

    def get_producer(self, system_name: str, config: Settings) -> LogSystemProducer:
        settings = config.view(LogSystemConfig, system_name)
        task = config.task
        if task.exactly_once and settings.transaction_timeout_ms <= task.commit_ms:
            raise ConfigError(
                f"systems.{system_name}.transaction.timeout.ms ({settings.transaction_timeout_ms}) must exceed "
                f"task.commit.ms ({task.commit_ms}) under task.processing.guarantee=exactly-once: a live container's "
                "transactions stay open about one commit interval and would be aborted"
            )
        return LogSystemProducer(
            system_name,
            LogLayout(settings.root(config), system_name),
            batch_size=settings.producer_batch_size,
            linger_ms=settings.producer_linger_ms,
            linger_when_drained=settings.producer_linger_when_drained,
            fsync=settings.fsync,
            auto_create_streams=settings.auto_create_streams,
            default_partitions=settings.default_partitions,
            transactional=task.exactly_once,
            transaction_timeout_ms=settings.transaction_timeout_ms,
            open_max=bounds(settings).producer,
        )

    def file_budget(self, system_name: str, config: Settings) -> FileBudget:
        """``DESCRIPTORS_PER_PARTITION`` for each partition the admin's, a consumer's and a producer's pools may
        hold open (the admin opens one around a query even with a pool of 0)."""
        settings = config.view(LogSystemConfig, system_name)
        keys = ("admin.open.partitions.max", "consumer.open.partitions.max", "producer.open.partitions.max")
        return FileBudget(bounds(settings).descriptors, tuple(f"systems.{system_name}.{key}" for key in keys))

    def describing_consumers(self, system_name: str, config: Settings) -> bool:
        """A consumer reads its partitions' offsets at start-up and keeps their files open for ``register``."""
        return True

    def transactional(self, system_name: str, config: Settings) -> bool:
        """A container's pooled producer writes in transactions of the log (``transactions``)."""
        return True

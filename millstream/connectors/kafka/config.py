"""``systems.<s>.*`` settings of a Kafka system, and the librdkafka configuration of its clients.

millstream's own keys are declared in :class:`KafkaSystemConfig`. Everything under
``systems.<s>.consumer.``, ``.producer.`` and ``.admin.`` is handed to librdkafka as is (Samza's
layout: ``systems.kafka.consumer.fetch.max.bytes``), and a value under
``sensitive.systems.<s>.<same key>`` (a SASL password, say) overrides the plain one and is never
printed. The admin client also receives the consumer's connection settings (``security.protocol``,
``sasl.*``, ``ssl.*``), as Samza builds its admin from the consumer's config, so they need not be
written three times.

``bootstrap.servers`` is ``systems.<s>.bootstrap.servers``, else Samza's
``systems.<s>.consumer.bootstrap.servers`` / ``producer.bootstrap.servers``.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import Field

from millstream.config.core import Config
from millstream.config.secrets import REDACTED, SENSITIVE_PREFIX, secret_values
from millstream.config.settings import Settings
from millstream.config.views import Bool, system_names
from millstream.connectors.kafka.logs import RateLimitedLog
from millstream.contracts.systems import SystemConfigView
from millstream.errors import ConfigError

CLIENT_PREFIXES = ("consumer.", "producer.", "admin.")
SHARED_CONNECTION_PREFIXES = ("security.protocol", "sasl.", "ssl.", "client.dns.lookup", "socket.", "broker.address.")
"""Consumer settings the admin client inherits: how to reach and authenticate with the brokers."""

LIBRDKAFKA_LOGGER = logging.getLogger("millstream.kafka.librdkafka")
LIBRDKAFKA_LOG = RateLimitedLog(LIBRDKAFKA_LOGGER)
"""What every client logs through: one line per condition (see ``logs``), shared by the process's clients, so a
broker restart logs each of its conditions once, not once per client and broker thread."""

KAFKA_FACTORY_NAMES = frozenset(
    {
        "kafka",
        "org.apache.samza.system.kafka.KafkaSystemFactory",
        "millstream.connectors.kafka.factory:KafkaSystemFactory",
        "millstream.connectors.kafka.factory.KafkaSystemFactory",
        "millstream.connectors.kafka:KafkaSystemFactory",
    }
)


class KafkaSystemConfig(SystemConfigView):
    """The keys a Kafka system accepts under ``systems.<s>.`` besides ``samza.*``, ``streams.*`` and
    the client prefixes."""

    bootstrap_servers: str | None = Field(None, alias="bootstrap.servers")
    """The brokers, ``host:port`` separated by commas; also accepted as Samza's ``consumer.bootstrap.servers``."""
    auto_create_streams: Bool = Field(False, alias="auto.create.streams")
    """Create a missing output topic on first send (``default.partitions``, ``default.replication.factor``)
    instead of failing with ``StreamNotFoundError``."""
    default_partitions: int = Field(1, alias="default.partitions", ge=1)
    """Partitions of a topic created with ``auto.create.streams``."""
    default_replication_factor: int = Field(-1, alias="default.replication.factor", ge=-1)
    """-1: the broker's ``default.replication.factor``."""
    poll_batch_size: int = Field(10_000, alias="poll.batch.size", ge=1)
    """Most messages one ``poll`` takes from librdkafka's queue (across the container's partitions)."""
    startup_timeout_ms: int = Field(10_000, alias="startup.timeout.ms", ge=1)
    """How long a client waits for brokers this process never reached before failing with a clear error (a wrong
    address fails fast); a client created while brokers it reached before are away waits up to
    ``outage.timeout.ms`` instead."""
    operation_timeout_ms: int = Field(60_000, alias="operation.timeout.ms", ge=1)
    """How long one admin request (metadata, offsets, topic creation) or one transaction call of a producer waits
    for the brokers' answer; on a container's run and commit paths a request that timed out is sent again until
    ``outage.timeout.ms`` has passed."""
    outage_timeout_ms: int = Field(300_000, alias="outage.timeout.ms", ge=1)
    """The deadline for riding out a broker restart or a network cut (Kafka Streams' ``task.timeout.ms``): how long
    every admin call (topic metadata, oldest and end offsets, deleting records) and every producer call on a
    container's run and commit paths (a topic's metadata, a flush that no broker acknowledges, a transaction's
    commit and abort, the replacement of a producer the brokers fenced) retries transient Kafka errors, with
    backoff, before failing with an error naming the call, the brokers and this key. A cut shorter than it is a
    stall, not a container failure; keep it above the longest outage a job must survive, and below
    ``task.commit.timeout.ms``."""
    flush_per_source: Bool = Field(False, alias="flush.per.source")
    """A task's commit waits only for its own output, not for every task's: the output producer (not
    transactional: at-least-once) counts each task's messages until librdkafka acknowledges them, and a task's
    flush waits until its count is 0 and raises only its own delivery failures. It costs every message a
    delivery report served in Python (about 1 µs of CPU per message, on a producer that costs 2 to 3 µs per
    send), so it is off by default: turn it on for containers of many tasks whose commits wait on each other's
    output (a slow partition of one task's output topic holds every task's commit without it). Changelog and
    exactly-once producers are transactional and flush everything either way: a transaction's commit needs
    it."""
    transactional_writes: Bool = Field(True, alias="transactional.writes")
    """A container writes its changelogs in Kafka transactions under the ``transactional.id``
    ``millstream-producer-<job.name>-<job.id>-<container>``, committed at each commit: a newer attempt of the
    container fences the older one, whose changelog writes since its last commit are aborted, so a superseded
    attempt that keeps running can never add records behind the offsets the newer attempt's restore read.
    Output goes through an idempotent producer and is visible at once; under
    ``task.processing.guarantee=exactly-once`` it joins the transaction, with the checkpoints. A transaction's
    timeout is three commit intervals (at least a minute, at most the brokers' default
    ``transaction.max.timeout.ms``, 15 minutes) unless ``producer.transaction.timeout.ms`` sets it; past it the
    brokers abort the transaction and its commit fails (``KafkaTransactionAbortedError``). ``false``: no
    transactions, and a zombie attempt's changelog writes are not fenced (refused under exactly-once)."""


def config_keys() -> frozenset[str]:
    return KafkaSystemConfig.keys()


def kafka_system_names(config: Config) -> list[str]:
    """Systems whose ``samza.factory`` is the Kafka factory, by any of its names."""
    return [s for s in system_names(config) if config.get(f"systems.{s}.samza.factory") in KAFKA_FACTORY_NAMES]


def resolve_kafka_system(config: Config, configured: str | None, key: str, purpose: str) -> str:
    """The Kafka system that hosts ``purpose``: ``configured`` (from ``key``), else the only Kafka system."""
    if configured:
        if configured not in kafka_system_names(config):
            raise ConfigError(
                f"config key '{key}' names system '{configured}', which is not a Kafka system "
                f"(set systems.{configured}.samza.factory=kafka)"
            )
        return configured
    candidates = kafka_system_names(config)
    if len(candidates) == 1:
        return candidates[0]
    found = f"Kafka systems: {', '.join(candidates)}" if candidates else "no Kafka system is configured"
    raise ConfigError(f"{purpose} needs a Kafka system: set '{key}' ({found})")


class KafkaClientSettings:
    """The librdkafka settings of one system's consumer, producer and admin clients.

    Built from config once per client (millstream's own keys come from the settings' view, parsed once per
    settings); keeps which values are secret so error messages can hide them.
    """

    def __init__(self, config: Settings, system: str) -> None:
        self.system = system
        self.settings = config.view(KafkaSystemConfig, system)
        prefix = f"systems.{system}."
        plain = config.subset(prefix)
        secret = config.subset(SENSITIVE_PREFIX + prefix)
        own = {value for value in secret.values() if value}  # masked however short: librdkafka quotes them
        self._secrets = sorted(own.union(secret_values(config)), key=len, reverse=True)
        merged = {**plain, **secret}
        self._clients: dict[str, dict[str, str]] = {}
        for client in CLIENT_PREFIXES:
            self._clients[client[:-1]] = {k[len(client) :]: v for k, v in merged.items() if k.startswith(client)}
        bootstrap = (
            merged.get("bootstrap.servers")
            or self._clients["consumer"].get("bootstrap.servers")
            or self._clients["producer"].get("bootstrap.servers")
        )
        if not bootstrap:
            raise ConfigError(
                f"Kafka system '{system}' has no brokers: set 'systems.{system}.bootstrap.servers' (host:port,...)"
            )
        self.bootstrap_servers = bootstrap

    def _base(self, client: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": f"millstream-{self.system}-{client}",
            "logger": LIBRDKAFKA_LOG,
        }

    def consumer(self, **overrides: Any) -> dict[str, Any]:
        """Assign-only consumer: no group membership, no offset commits (checkpoints are millstream's).

        ``fetch.queue.backoff.ms`` is 10 instead of librdkafka's 1000: with the default, a consumer
        whose prefetch queue fills up stops fetching for a second, which caps a fast reader at a
        fraction of what the broker serves (measured: 190k against 1M messages/s of 100 B).
        """
        settings = self._base("consumer")
        settings.update(
            {
                "group.id": f"millstream-{self.system}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "error",
                "enable.partition.eof": False,
                "fetch.queue.backoff.ms": 10,
            }
        )
        settings.update(self._clients["consumer"])
        settings.update(overrides)
        return settings

    def producer(self, **overrides: Any) -> dict[str, Any]:
        """Idempotent (no duplicates or reordering from retries), acks=all, Java-compatible key hashing."""
        settings = self._base("producer")
        settings.update({"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random"})
        settings.update(self._clients["producer"])
        settings.update(overrides)
        return settings

    def admin(self, **overrides: Any) -> dict[str, Any]:
        settings = self._base("admin")
        settings.update(
            {k: v for k, v in self._clients["consumer"].items() if k.startswith(SHARED_CONNECTION_PREFIXES)}
        )
        settings.update(self._clients["admin"])
        settings.update(overrides)
        return settings

    def isolation_level(self) -> str:
        """What the system's consumers read: librdkafka's default is ``read_committed``."""
        return str(self._clients["consumer"].get("isolation.level", "read_committed"))

    def redact(self, text: str) -> str:
        """``text`` with every secret value masked: librdkafka quotes invalid values in its errors."""
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def key_of(self, client: str, librdkafka_key: str) -> str:
        """The config key a librdkafka property of ``client`` came from, for error messages."""
        if librdkafka_key == "bootstrap.servers":
            return f"systems.{self.system}.bootstrap.servers"
        return f"systems.{self.system}.{client}.{librdkafka_key}"

"""Errors of the Kafka system; each names the brokers, topic, partition or offset at fault."""

from __future__ import annotations

from millstream.contracts.systems import OffsetOutOfRangeError, SystemOperationError
from millstream.errors import ConfigError


class KafkaSystemError(SystemOperationError):
    """An operation against Kafka failed; the message names the system and what was being done."""


class KafkaBrokersUnreachableError(KafkaSystemError):
    """No broker answered within the startup timeout: a wrong address, a broker down, a firewall."""

    def __init__(
        self, system: str, bootstrap_servers: str, timeout_s: float, detail: str, *, outage: bool = False
    ) -> None:
        self.system = system
        self.bootstrap_servers = bootstrap_servers
        check = (
            f"this process reached them before, so it waited systems.{system}.outage.timeout.ms"
            if outage
            else f"check systems.{system}.bootstrap.servers and that the brokers are up"
        )
        super().__init__(
            f"Kafka system '{system}': no broker at {bootstrap_servers} answered within {timeout_s:g}s ({detail}); "
            f"{check}"
        )


class KafkaClientConfigError(ConfigError):
    """librdkafka refused a setting handed through from ``systems.<s>.consumer.*`` / ``producer.*`` /
    ``admin.*``; the message names the config key."""


class KafkaProduceError(KafkaSystemError):
    """A message could not be written; raised at the next flush (before any checkpoint), never lost."""

    def __init__(self, system: str, topic: str, partition: int | None, offset: int | None, detail: str) -> None:
        self.system = system
        self.topic = topic
        self.partition = partition
        self.offset = offset
        where = f"topic '{topic}'"
        if partition is not None and partition >= 0:
            where += f" partition {partition}"
        if offset is not None and offset >= 0:
            where += f" offset {offset}"
        super().__init__(f"Kafka system '{system}': cannot write to {where}: {detail}")


class KafkaRecordTooLargeError(KafkaProduceError):
    """A record larger than the producer's ``message.max.bytes`` or the topic's ``max.message.bytes``."""


class KafkaConsumeError(KafkaSystemError):
    """Reading a partition failed for good (not a transient broker outage, which is retried)."""

    def __init__(self, system: str, topic: str, partition: int, offset: int | None, detail: str) -> None:
        self.system = system
        self.topic = topic
        self.partition = partition
        self.offset = offset
        at = f" at offset {offset}" if offset is not None and offset >= 0 else ""
        super().__init__(f"Kafka system '{system}': reading topic '{topic}' partition {partition}{at} failed: {detail}")


class KafkaOffsetOutOfRangeError(OffsetOutOfRangeError):
    """The position of a partition is below its oldest retained offset or beyond its end."""

    def __init__(self, system: str, topic: str, partition: int, offset: int | None, detail: str) -> None:
        self.system = system
        self.topic = topic
        self.partition = partition
        self.offset = offset
        at = f"offset {offset}" if offset is not None and offset >= 0 else "its position"
        super().__init__(
            f"Kafka system '{system}' topic '{topic}' partition {partition}: {at} is out of range ({detail}); "
            f"set systems.{system}.consumer.auto.offset.reset=earliest or latest to skip instead of failing"
        )


class KafkaOffsetError(KafkaSystemError):
    """An offset string that is not a non-negative integer."""

    def __init__(self, topic: str, partition: int, offset: str) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(
            f"Kafka topic '{topic}' partition {partition}: offset {offset!r} is not a non-negative integer"
        )


class KafkaTransactionAbortedError(KafkaProduceError):
    """The brokers aborted (or made the producer abort) the open transaction: nothing of it was written. Not a
    fence by a newer attempt; ``producer_usable`` says whether the same producer may begin another transaction
    or must be replaced (a producer the brokers fenced, or one in a fatal state)."""

    def __init__(self, system: str, transactional_id: str, detail: str, *, producer_usable: bool) -> None:
        self.transactional_id = transactional_id
        self.producer_usable = producer_usable
        super().__init__(
            system,
            "*",
            None,
            None,
            f"transactional.id {transactional_id}: transaction aborted, nothing of it written: {detail}",
        )

"""The records of a container's open changelog transaction, kept so a transaction the brokers aborted can be
written again instead of failing the container.

Under at-least-once the container's transactional producer holds its changelog writes only; a commit flushes
and commits them before the checkpoint that covers them is written. When a broker restart or a long network
cut makes the brokers abort that transaction (its timeout passed, or the restarted coordinator bumped the
producer's epoch), nothing of it was written, and those writes exist nowhere else: the store holds their
result, not the writes. :class:`TransactionReplay` keeps every record sent in the open transaction, in send
order, until it commits; the producer sends them again, in the same order, in the transaction that replaces
the aborted one, and only then commits — before any checkpoint covering them is written, and before the
snapshot reads the changelog's newest offset. The changelog then holds exactly the writes of the task, in its
order, and a restore gives exactly the store.

The cost: the producer keeps a reference to each record of the open transaction (one commit interval of
changelog writes; librdkafka holds a copy of each until it is acknowledged anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

Record = tuple[str, Any, Any, int, int | None, Any]
"""topic, value, key, partition (-1: librdkafka partitions by key), timestamp (ms) or None, headers or None."""


class TransactionReplay:
    """The records of one producer's open transaction; the producer's callers serialise it as they do sends."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    def recording(self, produce: Callable[..., Any]) -> Callable[..., None]:
        """``produce(topic, value, key, partition, on_delivery)`` that keeps what it sent (after librdkafka took it)."""
        append = self.records.append

        def produce_recorded(
            topic: str, value: Any, key: Any = None, partition: int = -1, on_delivery: Any = None
        ) -> None:
            produce(topic, value, key, partition, on_delivery)
            append((topic, value, key, partition, None, None))

        return produce_recorded

    def record(self, topic: str, value: Any, key: Any, partition: int, timestamp: int | None, headers: Any) -> None:
        self.records.append((topic, value, key, partition, timestamp, headers))

    def committed(self) -> None:
        """The transaction committed: its records are durable and need no replay."""
        self.records.clear()

    def replay(self, producer: Producer, make_room: Callable[[Producer], None]) -> int:
        """Send every record of the aborted transaction again through ``producer`` (in a new transaction), in
        order; they are kept until that one commits. Returns how many."""
        for topic, value, key, partition, timestamp, headers in self.records:
            while True:
                try:
                    if timestamp is None and not headers:
                        producer.produce(topic, value, key, partition)
                    else:
                        producer.produce(topic, value, key, partition, timestamp=timestamp or 0, headers=headers)
                    break
                except BufferError:
                    make_room(producer)
        return len(self.records)

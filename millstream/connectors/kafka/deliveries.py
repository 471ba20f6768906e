"""One source's messages that librdkafka has not acknowledged yet, and its failed deliveries.

A container's tasks share its output producer, and librdkafka can only flush all of a producer's messages: a
task's commit that waited for the whole producer waited for every other task's sends too, in proportion to the
container's tasks. Counting each source's unacknowledged messages (one more at each send, one less in its
delivery report) lets ``flush(source)`` wait for exactly what ``source`` sent, and raise exactly its failures.

Counts: ``sent`` grows on the source's sending thread before each ``produce`` (and shrinks again when the
produce raised), so a delivery report never comes before its send is counted and ``outstanding`` never
reports a message done before it is; ``acknowledged`` grows in the delivery report, on whichever thread
serves librdkafka's callbacks (several may), under a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from confluent_kafka import KafkaError, Message

from millstream.connectors.kafka.errors import KafkaProduceError

MAX_KEPT_FAILURES = 10
"""Failures kept per source between two flushes (more are counted, not kept)."""


class SourceDeliveries:
    """The sends of one source not yet acknowledged, and its failures since its last flush."""

    __slots__ = ("_describe", "_lock", "acknowledged", "failed", "failures", "sent")

    def __init__(self, describe: Callable[[KafkaError, Message], KafkaProduceError | None]) -> None:
        """``describe``: the failure a delivery error means, or None when it means none (an aborted
        transaction's purge, a fence the producer deals with)."""
        self._describe = describe
        self._lock = threading.Lock()
        self.sent = 0
        self.acknowledged = 0
        self.failures: list[KafkaProduceError] = []
        self.failed = 0

    @property
    def outstanding(self) -> int:
        """Messages sent and not yet reported delivered or failed."""
        return self.sent - self.acknowledged

    def delivered(self, error: KafkaError | None, message: Message) -> None:
        """librdkafka's delivery report of one of the source's messages (``on_delivery``)."""
        failure = None if error is None else self._describe(error, message)
        with self._lock:
            self.acknowledged += 1
            if failure is not None:
                self.failed += 1
                if len(self.failures) < MAX_KEPT_FAILURES:
                    self.failures.append(failure)

    def take_failures(self) -> tuple[list[KafkaProduceError], int]:
        """The failures kept and how many failed in all since the last call; both start again from none."""
        with self._lock:
            failures, self.failures = self.failures, []
            failed, self.failed = self.failed, 0
        return failures, failed

"""The transactional writer of the replicated logs (the Kafka metadata store, the checkpoint topic): what a failed
delivery means for the transaction that held it. Against a fake producer; the broker restarts that cause these
failures run against a real broker in ``tests/integration/kafka/test_broker_restart.py``."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from millstream.connectors.kafka.replicated_log import (
    ReplicatedLogTimeoutError,
    StalledProducerError,
    TransactionAbortedError,
    TransactionalWriter,
    classify,
)


class FailingDeliveries:
    """A producer whose records are all reported failed with ``codes``, one per record, when flushed."""

    def __init__(self, *codes: int) -> None:
        self.codes = list(codes)
        self.pending: list[Callable[[KafkaError | None, Any], None]] = []

    def produce(self, topic: str, value: bytes | None, key: bytes, partition: int, on_delivery: Any) -> None:
        self.pending.append(on_delivery)

    def flush(self, timeout: float) -> int:
        for on_delivery, code in zip(self.pending, self.codes, strict=True):
            on_delivery(KafkaError(code), None)
        self.pending = []
        return 0


class NeverAcknowledges:
    """A producer whose records stay queued: each flush lets its timeout pass on ``clock`` and reports them left."""

    def __init__(self) -> None:
        self.now = 0.0
        self.queued = 0

    def clock(self) -> float:
        return self.now

    def produce(self, topic: str, value: bytes | None, key: bytes, partition: int, on_delivery: Any) -> None:
        self.queued += 1

    def flush(self, timeout: float) -> int:
        self.now += timeout
        return self.queued


def writer_with(producer: FailingDeliveries | NeverAcknowledges, **options: Any) -> TransactionalWriter:
    kafka: Any = SimpleNamespace(system="kafka", bootstrap_servers="broker:9092", producer=lambda **settings: settings)
    writer = TransactionalWriter(kafka, "__coordinator", "writer-1", transaction_timeout_ms=60_000, **options)
    writer._producer = producer  # type: ignore[assignment]  # the fake stands in for the started producer
    return writer


RECORDS: list[tuple[bytes, bytes | None]] = [(b"k1", b"v1"), (b"k2", b"v2")]


@pytest.mark.parametrize("purge", [KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT])
def test_records_purged_by_a_failed_transaction_make_the_write_an_aborted_transaction_to_redo(purge: int) -> None:
    """After a broker restart librdkafka fails the open transaction (OUT_OF_ORDER_SEQUENCE_NUMBER, an epoch bump)
    and purges its records: the write is redone in a new transaction, not failed."""
    with pytest.raises(TransactionAbortedError, match="not delivered") as raised:
        writer_with(FailingDeliveries(purge, purge)).append(RECORDS, deadline=float("inf"))
    assert classify(raised.value) == "abort"


def test_a_records_own_failure_is_reported_rather_than_the_purge_it_caused() -> None:
    with pytest.raises(KafkaException) as raised:
        writer_with(FailingDeliveries(KafkaError._PURGE_QUEUE, KafkaError.MSG_SIZE_TOO_LARGE)).append(
            RECORDS, deadline=float("inf")
        )
    assert not isinstance(raised.value, TransactionAbortedError)
    assert raised.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_a_write_unacknowledged_for_twice_the_transaction_timeout_replaces_the_stuck_producer() -> None:
    """Once seen after a broker restart: the producer's request to the transaction coordinator never left its
    queue, and the write waited out the store's whole 120 s deadline. A transaction cannot outlive its timeout, so
    a write unanswered for twice as long fails as a stuck producer, which the callers replace."""
    producer = NeverAcknowledges()
    with pytest.raises(StalledProducerError, match="unacknowledged for 120s, twice the transaction timeout"):
        writer_with(producer, clock=producer.clock).append(RECORDS, deadline=float("inf"))
    assert 120.0 <= producer.now <= 121.0
    assert classify(StalledProducerError("stuck")) == "fatal"


def test_a_write_unacknowledged_until_its_deadline_is_a_timeout_to_retry() -> None:
    producer = NeverAcknowledges()
    with pytest.raises(ReplicatedLogTimeoutError, match="not acknowledged in time") as raised:
        writer_with(producer, clock=producer.clock).append(RECORDS, deadline=30.0)
    assert not isinstance(raised.value, StalledProducerError) and classify(raised.value) == "retry"

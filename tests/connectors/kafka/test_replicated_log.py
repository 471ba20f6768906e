"""The transactional writer of the replicated logs (the Kafka metadata store, the checkpoint topic): what a failed
delivery means for the transaction that held it. Against a fake producer; the broker restarts that cause these
failures run against a real broker in ``tests/integration/kafka/test_broker_restart.py``."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from millstream.connectors.kafka.replicated_log import TransactionAbortedError, TransactionalWriter, classify


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


def writer_with(producer: FailingDeliveries) -> TransactionalWriter:
    kafka: Any = SimpleNamespace(system="kafka", bootstrap_servers="broker:9092", producer=lambda **settings: settings)
    writer = TransactionalWriter(kafka, "__coordinator", "writer-1", transaction_timeout_ms=60_000)
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

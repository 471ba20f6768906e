"""A container's Kafka producer writes in transactions, so a superseded attempt (a zombie) is fenced.

Kafka Streams' exactly-once (v2) model, without the consumer-group part: the container's pooled producer
has ``transactional.id`` ``millstream-producer-<job.name>-<job.id>-<container>``. A new attempt's
``init_transactions`` aborts whatever the previous attempt left open and bumps the producer epoch, so the
zombie's next produce or commit fails with a fencing error: nothing it wrote since its last commit ever
becomes visible to ``read_committed`` readers (the default of millstream's consumers, and what a
changelog restore reads), and the offsets a checkpoint names (the last stable offset) never cover it.
Each commit's producer flush commits the open transaction and begins the next, so what a checkpoint
covers is committed before the checkpoint is written.

Output becomes visible to ``read_committed`` consumers at each commit (``task.commit.ms``), as with
Kafka Streams' exactly-once; ``systems.<s>.transactional.writes=false`` turns this off (an idempotent
producer, visible at once, and no fencing of zombies' writes).
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException, Producer

from millstream.systems.base import WriterFencedError, WriterToken
from millstream.systems.kafka.client import kafka_error
from millstream.systems.kafka.errors import KafkaProduceError

FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED})
"""A newer producer with the same ``transactional.id`` started. ``INVALID_PRODUCER_EPOCH`` means it only
when librdkafka says the producer was fenced: the broker's abort of a timed-out transaction also causes
it, and then the transaction is aborted (the commit fails and the container is retried) but no newer
attempt exists."""


def transactional_id(writer: WriterToken) -> str:
    return f"millstream-producer-{writer.job}-{writer.container_id}"


class ProducerTransactions:
    """The transaction state of one producer; callers serialise ``produced`` and ``commit``."""

    def __init__(self, system: str, writer: WriterToken, timeout_ms: int) -> None:
        self.system = system
        self.writer = writer
        self.transactional_id = transactional_id(writer)
        self._timeout_s = timeout_ms / 1000
        self._open = False
        self.fenced: WriterFencedError | None = None

    def start(self, producer: Producer) -> None:
        """Take over the transactional id (fencing and aborting earlier attempts), then begin."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                producer.init_transactions(max(1.0, deadline - time.monotonic()))
                break
            except KafkaException as error:
                self._raise_fenced(error)
                if not _retriable(error) or time.monotonic() >= deadline:
                    raise KafkaProduceError(self.system, "*", None, None, self._describe(error)) from None
        producer.begin_transaction()
        self._open = True

    def check(self) -> None:
        if self.fenced is not None:
            raise self.fenced

    def commit(self, producer: Producer) -> None:
        """Commit what was produced since the last commit and begin the next transaction; raises
        ``WriterFencedError`` (for good) when a newer attempt took the transactional id."""
        self.check()
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                producer.commit_transaction(max(1.0, deadline - time.monotonic()))
                break
            except KafkaException as error:
                self._raise_fenced(error)
                inner = kafka_error(error)
                if inner is not None and inner.txn_requires_abort():
                    producer.abort_transaction(max(1.0, deadline - time.monotonic()))
                    producer.begin_transaction()
                    raise KafkaProduceError(
                        self.system, "*", None, None, f"transaction aborted, nothing of it written: {inner.str()}"
                    ) from None
                if not _retriable(error) or time.monotonic() >= deadline:
                    raise KafkaProduceError(self.system, "*", None, None, self._describe(error)) from None
        producer.begin_transaction()

    def fenced_by(self, error: KafkaError) -> WriterFencedError | None:
        """The fencing error a delivery failure or produce error means, if it is one (then kept for good)."""
        code = error.code()
        if code in FENCED_CODES or (code == KafkaError.INVALID_PRODUCER_EPOCH and "fenced" in error.str()):
            target = f"Kafka system '{self.system}' transactional.id {self.transactional_id}"
            self.fenced = WriterFencedError(target, self.writer, error.str())
            return self.fenced
        return None

    def _raise_fenced(self, error: KafkaException) -> None:
        if self.fenced is not None:  # a delivery report said so while the call flushed
            raise self.fenced from None
        inner = kafka_error(error)
        if inner is not None and (fenced := self.fenced_by(inner)) is not None:
            raise fenced from None

    def _describe(self, error: KafkaException) -> str:
        inner = kafka_error(error)
        return f"transactional.id {self.transactional_id}: {inner.str() if inner is not None else error}"


def _retriable(error: KafkaException) -> bool:
    inner = kafka_error(error)
    return inner is not None and bool(inner.retriable())

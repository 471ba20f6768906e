"""A container's Kafka producer writes in transactions, so a superseded attempt (a zombie) is fenced.

Kafka Streams' exactly-once (v2) model, without the consumer-group part: the container's transactional
producer (``ProducerPool.state_producer``: changelog writes, and under exactly-once output, control messages
and checkpoints too) has ``transactional.id`` ``millstream-producer-<job.name>-<job.id>-<container>``. A new attempt's
``init_transactions`` aborts whatever the previous attempt left open and bumps the producer epoch, so the
zombie's next produce or commit fails with a fencing error: nothing it wrote since its last commit ever
becomes visible to ``read_committed`` readers (the default of millstream's consumers, and what a
changelog restore reads), and the offsets a checkpoint names (the last stable offset) never cover it.
Each commit's producer flush commits the open transaction and begins the next, so what a checkpoint
covers is committed before the checkpoint is written. A transaction the brokers aborted while no newer attempt
exists is not a fence: under at-least-once it is sent again and committed (``replay``), under exactly-once the
commit fails with ``KafkaTransactionAbortedError`` and the container restarts from its last checkpoint.

Under at-least-once, output is written by another, idempotent producer and is visible at once; only what a
restore reads (changelogs) waits for the commit. Under exactly-once everything a commit covers becomes
visible with its transaction. ``systems.<s>.transactional.writes=false`` turns transactions off (no fencing
of zombies' changelog writes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Producer

from millstream.connectors.kafka.client import create_client, is_retriable, kafka_error
from millstream.connectors.kafka.config import KafkaClientSettings
from millstream.connectors.kafka.errors import KafkaProduceError, KafkaTransactionAbortedError
from millstream.contracts.systems import WriterFencedError, WriterToken

log = logging.getLogger(__name__)

ABORT_TIMEOUT_S = 10.0
"""Longest a stopping producer waits for its abort: the broker aborts the transaction at its timeout anyway."""

FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED})
"""The producer's epoch was bumped: a newer producer with the same ``transactional.id`` started, or the brokers
aborted a transaction that outlived its timeout (while they restarted, or a network cut held the commit) and
bumped the epoch themselves; librdkafka says "fenced by a newer instance" either way. Only the metadata store
tells them apart (``KafkaSystemProducer`` asks it). ``INVALID_PRODUCER_EPOCH`` means it only when librdkafka says
the producer was fenced; otherwise the transaction was aborted (``KafkaTransactionAbortedError``)."""


def transactional_id(job: str, container_id: str) -> str:
    """The ``transactional.id`` of a container's producer: every generation's container of that id shares it."""
    return f"millstream-producer-{job}-{container_id}"


def init_transactions(producer: Producer, timeout_s: float, on_error: Callable[[KafkaException], None]) -> None:
    """Take over the producer's ``transactional.id``, aborting what an earlier holder left open and bumping
    the epoch so that holder's next produce or commit fails; retried while the broker says so (a transaction
    coordinator loading), ``on_error`` first sees every failure and may raise its own."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            producer.init_transactions(max(1.0, deadline - time.monotonic()))
            return
        except KafkaException as error:
            on_error(error)
            if not is_retriable(error) or time.monotonic() >= deadline:
                raise


def fence_transactional_id(system: str, kafka: KafkaClientSettings, container_id: str, job: str) -> None:
    """Fence whatever producer holds ``container_id``'s ``transactional.id`` (a superseded generation's
    container that keeps running): its open transaction is aborted and its next commit raises
    ``WriterFencedError``. The fencing producer writes nothing and is closed at once."""
    tid = transactional_id(job, container_id)
    producer = create_client(Producer, kafka.producer(**{"transactional.id": tid}), "producer", kafka)
    try:
        init_transactions(producer, kafka.settings.operation_timeout_ms / 1000, lambda _: None)
    except KafkaException as error:
        inner = kafka_error(error)
        if inner is not None and inner.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            log.info(
                "Kafka system '%s': not allowed to use transactional.id %s, so no container wrote with it", system, tid
            )
            return
        detail = inner.str() if inner is not None else str(error)
        raise KafkaProduceError(system, "*", None, None, f"cannot fence transactional.id {tid}: {detail}") from None
    finally:
        producer.close()


class ProducerTransactions:
    """The transaction state of one producer; callers serialise ``produced`` and ``commit``."""

    def __init__(
        self,
        system: str,
        writer: WriterToken,
        timeout_ms: int,
        brokers: str = "",
        request_timeout_ms: int | None = None,
    ) -> None:
        """``timeout_ms``: how long a commit retries transient failures (``systems.<s>.outage.timeout.ms``), each
        call waiting at most ``request_timeout_ms`` (``operation.timeout.ms``); ``brokers``: named past it."""
        self.system = system
        self._request_timeout_s = (request_timeout_ms or timeout_ms) / 1000
        self.brokers = brokers
        self.writer = writer
        self.transactional_id = transactional_id(writer.job, writer.container_id)
        self._timeout_s = timeout_ms / 1000
        self._open = False
        self.fenced: WriterFencedError | None = None
        self.fence_detail = ""
        """What the brokers said when they fenced the producer (a newer attempt or not: see the caller)."""

    def start(self, producer: Producer) -> None:
        """Take over the transactional id (fencing and aborting earlier attempts), then begin."""
        try:
            init_transactions(producer, self._timeout_s, self._raise_fenced)
        except KafkaException as error:
            raise KafkaProduceError(self.system, "*", None, None, self._describe(error)) from None
        producer.begin_transaction()
        self._open = True

    def replace(self, producer: Producer) -> None:
        """Carry on with ``producer`` in place of one the brokers fenced or left unusable: it takes over the same
        transactional id (bumping the epoch again) and begins a transaction. Only for a writer still the
        container's current attempt: the caller checked (see ``KafkaSystemProducer``)."""
        self.fenced = None
        self._open = False
        self.start(producer)

    def check(self) -> None:
        if self.fenced is not None:
            raise self.fenced

    def commit(self, producer: Producer) -> None:
        """Commit what was produced since the last commit and begin the next transaction.

        Transient failures (a broker restarting, requests timing out, the flush not done yet) are retried until
        ``systems.<s>.outage.timeout.ms`` has passed. Raises ``WriterFencedError`` when the producer was fenced
        (by a newer attempt or by the brokers, who bump the epoch of a transaction they timed out: the caller
        tells which, see ``KafkaSystemProducer``), and ``KafkaTransactionAbortedError`` when the transaction was
        aborted and nothing of it written."""
        self.check()
        deadline = time.monotonic() + self._timeout_s
        backoff = 0.05
        while True:
            try:
                producer.commit_transaction(max(1.0, min(self._request_timeout_s, deadline - time.monotonic())))
                break
            except KafkaException as error:
                self._raise_fenced(error)
                inner = kafka_error(error)
                if inner is not None and (inner.txn_requires_abort() or inner.fatal()):
                    raise self._aborted(producer, inner, deadline) from None
                if not is_retriable(error) or time.monotonic() >= deadline:
                    raise self._commit_failed(error, retried=is_retriable(error)) from None
                log.debug("Kafka system '%s': committing %s: %s (retrying)", self.system, self.transactional_id, error)
                time.sleep(backoff)  # an answer that came at once (no broker to send to) comes at once again
                backoff = min(backoff * 2, 1.0)
        producer.begin_transaction()

    def _aborted(self, producer: Producer, cause: KafkaError, deadline: float) -> KafkaTransactionAbortedError:
        """Abort the transaction the brokers refused to commit and begin the next one; the error saying so, which
        says too whether the producer can go on (not after a fatal error or a failed abort)."""
        usable = not cause.fatal()
        while usable:
            try:
                producer.abort_transaction(max(1.0, min(self._request_timeout_s, deadline - time.monotonic())))
                producer.begin_transaction()
                break
            except KafkaException as error:
                self._raise_fenced(error)
                if not is_retriable(error) or time.monotonic() >= deadline:
                    usable = False
        return KafkaTransactionAbortedError(self.system, self.transactional_id, cause.str(), producer_usable=usable)

    def abort(self, producer: Producer) -> None:
        """Abort the open transaction (nothing of it becomes visible); a failure to reach the brokers is left
        to the transaction's timeout, or to the next attempt's ``init_transactions``, which abort it anyway."""
        if self.fenced is not None or not self._open:
            return
        try:
            producer.abort_transaction(min(self._timeout_s, ABORT_TIMEOUT_S))
        except KafkaException as error:
            log.warning(
                "Kafka system '%s': aborting the open transaction failed: %s", self.system, self._describe(error)
            )
        self._open = False

    def fenced_by(self, error: KafkaError) -> WriterFencedError | None:
        """The fencing error a delivery failure or produce error means, if it is one (then kept for good)."""
        code = error.code()
        if code in FENCED_CODES or (code == KafkaError.INVALID_PRODUCER_EPOCH and "fenced" in error.str()):
            target = f"Kafka system '{self.system}' transactional.id {self.transactional_id}"
            self.fence_detail = error.str()
            self.fenced = WriterFencedError(target, self.writer, error.str())
            return self.fenced
        return None

    def _raise_fenced(self, error: KafkaException) -> None:
        if self.fenced is not None:  # a delivery report said so while the call flushed
            raise self.fenced from None
        inner = kafka_error(error)
        if inner is not None and (fenced := self.fenced_by(inner)) is not None:
            raise fenced from None

    def _commit_failed(self, error: KafkaException, *, retried: bool) -> KafkaProduceError:
        at = f" at brokers {self.brokers}" if self.brokers else ""
        deadline = (
            f" (retried for {self._timeout_s * 1000:.0f} ms, systems.{self.system}.outage.timeout.ms)"
            if retried
            else ""
        )
        return KafkaProduceError(
            self.system, "*", None, None, f"committing the transaction{at} failed{deadline}: {self._describe(error)}"
        )

    def _describe(self, error: KafkaException) -> str:
        inner = kafka_error(error)
        return f"transactional.id {self.transactional_id}: {inner.str() if inner is not None else error}"

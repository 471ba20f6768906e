"""The Kafka metadata store: the job's coordinator stream, so that containers on any host share
the job model, epochs, stop signals and startpoints without a shared disk.

**Layout.** One single-partition compacted topic per job (``job.coordinator.topic``, default
``__millstream-coordinator-<job.name>-<job.id>``) on the Kafka system ``job.coordinator.system``.
A record's key is the JSON array ``[namespace, key]``; its value is the record's bytes, a tombstone
(null value) deletes it. Every process holds the whole store in memory: it reads the topic from
the beginning once and then only what was appended since.

**Reads** (``get``, ``all``) first catch up to the topic's high watermark as of the call, waiting for
transactions still open below it, so they see every write that completed before they began, from
any process (read-your-writes).

**Writes** are Kafka transactions of one producer per store instance (``transactional.id``
``millstream-metadata-<job>-<random>``): ``put``, ``delete``, ``put_all`` and ``delete_all`` are
each one transaction, atomic and durable (``acks=all``) when the call returns.

**compare_and_put** is a replicated state machine decision taken by the writer:

1. append the new value in an open transaction; the broker assigns it offset *o*;
2. read the log up to *o*. Readers stop at the first open transaction, so this returns once every
   record before *o* is either committed (and applied to the local copy) or aborted: the local copy
   is then exactly the store's state "just before *o*", the same for every process;
3. evaluate the expectations against it; commit the transaction if they hold, abort it otherwise.

Two writers racing on a key are therefore ordered by their offsets: the later one decides only
after the earlier one's outcome is known, against a state that includes it. A reader that starts
after the decision blocks on the open transaction until it is decided, so no one ever observes the
value before it won, and no one observes a losing value at all.

**Compaction is safe by construction.** The committed log holds only plain key → value records
(winners and unconditional writes, each the key's full new value) and tombstones; losing
conditional writes are aborted, and the log cleaner removes aborted records. Keeping only the
latest record per key therefore keeps exactly the current state: no record's meaning depends on
records before it, so there is nothing a conditional record needs that compaction could remove.
The one hazard left is Kafka's own: a tombstone is removed ``delete.retention.ms`` (1 day) after
it was cleaned, so a process that did not read the topic for that long could miss a delete. The
store reads the whole topic again when its last read is older than :data:`REBUILD_AFTER_S`.

**Failure.** A crashed writer's open transaction holds readers back until the broker aborts it
(``transaction.timeout.ms`` = :data:`TRANSACTION_TIMEOUT_MS`, plus the broker's abort-scan
interval). Operations retry through broker outages for :data:`OPERATION_TIMEOUT_S`.

The store pickles to its config alone (Spark ships it to executors); each process opens its own
clients on first use, and a client inherited through ``fork`` is never used by the child.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from millstream.config.settings import Settings
from millstream.connectors.kafka.config import KafkaClientSettings, resolve_kafka_system
from millstream.connectors.kafka.replicated_log import (
    LogReader,
    TransactionalWriter,
    classify,
    ensure_log_topic,
    log_topic_name,
)
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.metadata_factory import MetadataStoreFactory
from millstream.errors import MillstreamError

log = logging.getLogger(__name__)

TRANSACTION_TIMEOUT_MS = 10_000
OPERATION_TIMEOUT_S = 120.0
REBUILD_AFTER_S = 6 * 3600.0


class KafkaMetadataStoreError(MillstreamError):
    """An operation on the coordinator stream failed for good; the message names the topic and brokers."""


def _key(namespace: str, key: str) -> bytes:
    return orjson.dumps([namespace, key])


class KafkaMetadataStore(MetadataStore):
    """``MetadataStore`` on the job's coordinator stream; safe for any number of processes and threads."""

    def __init__(self, config: Settings) -> None:
        self.config = config
        job = config.job
        self.system = resolve_kafka_system(
            config, job.coordinator_system, "job.coordinator.system", "metadata.store.factory=kafka"
        )
        self.topic = job.coordinator_topic or log_topic_name("coordinator", job.name, job.id)
        self.replication_factor = job.coordinator_replication_factor
        self._job_key = job.job_key
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._kafka: KafkaClientSettings | None = None
        self._reader: LogReader | None = None
        self._writer: TransactionalWriter | None = None
        self._state: dict[tuple[str, str], bytes] = {}
        self._last_read = 0.0

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "source": self.config.source}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(Settings(state["config"], state["source"]))  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"KafkaMetadataStore(system={self.system!r}, topic={self.topic!r})"

    # --- connection ------------------------------------------------------------------------------

    def _settings(self) -> KafkaClientSettings:
        if self._kafka is None:
            self._kafka = KafkaClientSettings(self.config, self.system)
        return self._kafka

    def _open(self) -> LogReader:
        if self._pid != os.getpid():
            self._reset()  # a parent's librdkafka clients are not ours to use after a fork
        if self._reader is None:
            kafka = self._settings()
            ensure_log_topic(kafka, self.topic, self.replication_factor, "the coordinator stream")
            self._reader = LogReader(kafka, self.topic, self._apply, client="metadata-reader")
            self._state = {}
        return self._reader

    def _open_writer(self, deadline: float) -> TransactionalWriter:
        if self._writer is None:
            self._writer = TransactionalWriter(
                self._settings(),
                self.topic,
                f"millstream-metadata-{self._job_key}-{uuid.uuid4().hex}",
                transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
                client="metadata-writer",
            )
        self._writer.open(deadline)
        return self._writer

    def _apply(self, message: Any) -> None:
        try:
            namespace, key = orjson.loads(message.key())
        except (orjson.JSONDecodeError, TypeError, ValueError):
            log.warning(
                "coordinator stream '%s' offset %s: ignored a record whose key is not [namespace, key]: %r",
                self.topic,
                message.offset(),
                message.key(),
            )
            return
        value = message.value()
        if value is None:
            self._state.pop((namespace, key), None)
        else:
            self._state[(namespace, key)] = value

    def _catch_up(self, deadline: float) -> None:
        reader = self._open()
        now = time.monotonic()
        if self._last_read and now - self._last_read > REBUILD_AFTER_S:
            reader.rewind()
            self._state = {}
        reader.catch_up(deadline)
        self._last_read = now

    @staticmethod
    def _deadline() -> float:
        return time.monotonic() + OPERATION_TIMEOUT_S

    # --- MetadataStore ---------------------------------------------------------------------------

    def init(self) -> None:
        with self._lock:
            self._catch_up(self._deadline())

    def get(self, namespace: str, key: str) -> bytes | None:
        with self._lock:
            self._catch_up(self._deadline())
            return self._state.get((namespace, key))

    def all(self, namespace: str) -> dict[str, bytes]:
        with self._lock:
            self._catch_up(self._deadline())
            return {key: value for (ns, key), value in sorted(self._state.items()) if ns == namespace}

    def put(self, namespace: str, key: str, value: bytes) -> None:
        self._write([(_key(namespace, key), bytes(value))])

    def put_all(self, namespace: str, items: Mapping[str, bytes]) -> None:
        """Every item in one transaction: all of them or none."""
        if items:
            self._write([(_key(namespace, key), bytes(value)) for key, value in items.items()])

    def delete(self, namespace: str, key: str) -> None:
        self._write([(_key(namespace, key), None)])

    def delete_all(self, namespace: str, keys: Iterable[str]) -> None:
        """Every delete in one transaction."""
        records: list[tuple[bytes, bytes | None]] = [(_key(namespace, key), None) for key in keys]
        if records:
            self._write(records)

    def _write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append ``records`` in one committed transaction, retrying through broker outages.

        An unconditional write may be repeated after an error whose outcome is unknown: writing the
        same values twice leaves the same state.
        """
        with self._lock:
            self._open()
            deadline = self._deadline()
            while True:
                writer = self._open_writer(deadline)
                try:
                    writer.begin()
                    writer.append(records, deadline)
                    writer.commit(deadline)
                    return
                except Exception as error:  # classified below; anything unknown is re-raised
                    self._recover(writer, error, deadline, "writing")

    def compare_and_put(
        self,
        namespace: str,
        key: str,
        value: bytes,
        expected: Mapping[tuple[str, str], bytes | None],
    ) -> bool:
        wanted = {item: None if v is None else bytes(v) for item, v in expected.items()}
        records: list[tuple[bytes, bytes | None]] = [(_key(namespace, key), bytes(value))]
        with self._lock:
            reader = self._open()
            deadline = self._deadline()
            # The offset of an earlier attempt's record whose transaction may have committed before an error.
            undecided: int | None = None
            while True:
                writer = self._open_writer(deadline)
                try:
                    if undecided is not None:
                        # Its fate is settled by now (aborted by the writer's recovery, or committed
                        # before the error): a committed record is the write, done.
                        committed = reader.read_until(undecided + 1, deadline, watch=undecided)
                        undecided = None
                        if committed:
                            return True
                    writer.begin()
                    offset = writer.append(records, deadline)
                    undecided = offset
                    reader.read_until(offset, deadline)
                    accepted = all(self._state.get(item) == v for item, v in wanted.items())
                    if accepted:
                        writer.commit(deadline)
                    else:
                        writer.abort(deadline)
                    return accepted
                except Exception as error:  # classified below; anything unknown is re-raised
                    self._recover(writer, error, deadline, "a conditional write")
                    if undecided is not None and reader.position > undecided:
                        undecided = None

    def _recover(self, writer: TransactionalWriter, error: Exception, deadline: float, what: str) -> None:
        """Get ``writer`` ready for another attempt after ``error``, or raise it."""
        kind = classify(error)
        if kind == "other" or time.monotonic() >= deadline:
            writer.close()  # aborts an open transaction, so no reader waits for it to time out
            writer.discard()
            if isinstance(error, MillstreamError):
                raise error
            raise KafkaMetadataStoreError(
                f"coordinator stream '{self.topic}' at {self._settings().bootstrap_servers}: {what} failed: {error}"
            ) from error
        log.warning("coordinator stream '%s': %s failed (%s); retrying", self.topic, what, error)
        if kind == "abort" or kind == "retry":
            try:
                writer.abort(deadline)
                return
            except Exception:  # an abort that fails leaves the producer unusable: start another
                pass
        writer.discard()
        time.sleep(0.1)

    def flush(self) -> None:
        """Writes are committed when they return; nothing is buffered."""

    def close(self) -> None:
        """Close this process's clients; the store reopens them if used again."""
        with self._lock:
            if self._pid != os.getpid():
                self._reset()
                return
            if self._writer is not None:
                self._writer.close()
            if self._reader is not None:
                self._reader.close()
            self._reader = None
            self._writer = None
            self._state = {}
            self._last_read = 0.0


class KafkaMetadataStoreFactory(MetadataStoreFactory):
    """``metadata.store.factory=kafka``: the coordinator stream on ``job.coordinator.system``."""

    def get_metadata_store(self, config: Settings) -> MetadataStore:
        return KafkaMetadataStore(config)

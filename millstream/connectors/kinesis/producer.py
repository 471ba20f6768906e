"""Writes envelopes to Kinesis streams with PutRecords, retrying each failed record on its own.

**Where a record goes.** Its partition key is the envelope's ``partition_key``, else its ``key``
(UTF-8 text; other bytes are written as hex), else ``str(partition)`` when a partition number is
pinned, else a random key. Kinesis hashes the key (MD5) into a shard's hash-key range; a header
``kinesis.explicit.hash.key`` (a decimal 128-bit integer) overrides the hash, to pin a shard. Kinesis
records have no headers, so other headers are not written.

**Batching.** Records are buffered per stream and sent with one PutRecords call per 500 records or
5 MiB (``producer.batch.records`` / ``producer.batch.bytes``), when a buffer fills and on ``flush``.
PutRecords succeeds or fails *per record*: failed records (``ProvisionedThroughputExceededException``,
``InternalFailure``) stay in the buffer at their place and are sent again in the next call, after a
backoff, up to ``producer.max.attempts`` times each; a record that exhausts them — or any call Kinesis
refuses outright (a missing stream, bad credentials) — makes ``flush`` raise, so the task's checkpoint
is not written and the input is processed again after the restart: at-least-once.

**Order.** PutRecords does not keep order across failures: a retried record lands after records of its
key that succeeded in the same call. With ``producer.preserve.key.order=true`` a call carries at most one
record per partition key (the oldest unsent one), so a key's records are written in the order they were
sent, at the cost of smaller calls when few keys are hot.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from millstream.connectors.kinesis.config import KinesisClients, KinesisSystemConfig
from millstream.connectors.kinesis.errors import KinesisProduceError, KinesisSystemError
from millstream.connectors.kinesis.throttling import Backoff, KinesisMetrics, error_code, is_throttling, is_transient
from millstream.contracts.systems import SystemProducer
from millstream.model import OutgoingMessageEnvelope

log = logging.getLogger(__name__)

EXPLICIT_HASH_KEY_HEADER = "kinesis.explicit.hash.key"
MAX_RECORD_BYTES = 1024 * 1024
"""Kinesis's limit per record: data plus partition key."""
MAX_HASH_KEY = 2**128 - 1
BUFFERED_BATCHES = 4
"""Full batches a stream may buffer before ``send`` blocks until Kinesis takes some (backpressure)."""


@dataclass
class _Pending:
    data: bytes
    partition_key: str
    explicit_hash_key: str | None
    size: int
    attempts: int = 0

    def entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"Data": self.data, "PartitionKey": self.partition_key}
        if self.explicit_hash_key is not None:
            entry["ExplicitHashKey"] = self.explicit_hash_key
        return entry


class KinesisSystemProducer(SystemProducer):
    """``SystemProducer`` of a Kinesis system; thread-safe. ``flush`` flushes every source."""

    def __init__(
        self,
        system: str,
        settings: KinesisSystemConfig,
        clients: KinesisClients,
        metrics: KinesisMetrics | None = None,
    ) -> None:
        self.system = system
        self.settings = settings
        self.clients = clients
        self.metrics = metrics or KinesisMetrics()
        self._buffers: dict[str, list[_Pending]] = {}
        self._buffered_bytes: dict[str, int] = {}
        self._failures: list[tuple[str, str, str, str]] = []
        """(stream, partition key, error code, message) of each record that could not be written."""
        self._lock = threading.Lock()
        self._backoff = Backoff(settings.producer_backoff_initial_ms / 1000, settings.producer_backoff_max_ms / 1000)
        self._warned_headers = False

    def start(self) -> None:
        pass

    def stop(self) -> None:
        """Flush everything buffered; raises if some of it could not be written."""
        self.flush("stop")

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        stream = envelope.system_stream.stream
        if envelope.system_stream.system != self.system:
            raise KinesisSystemError(self.system, f"this producer cannot send to '{envelope.system_stream}'")
        record = self._record(stream, envelope)
        settings = self.settings
        with self._lock:
            buffer = self._buffers.setdefault(stream, [])
            buffer.append(record)
            buffered = self._buffered_bytes[stream] = self._buffered_bytes.get(stream, 0) + record.size
            if len(buffer) >= settings.producer_batch_records or buffered >= settings.producer_batch_bytes:
                self._send_batch(stream, buffer)
                while len(buffer) >= BUFFERED_BATCHES * settings.producer_batch_records:
                    self._send_batch(stream, buffer)

    def flush(self, source: str) -> None:
        """Write every buffered record (of every source); raise a ``KinesisProduceError`` for those that
        could not be written."""
        with self._lock:
            for stream, buffer in self._buffers.items():
                while buffer:
                    self._send_batch(stream, buffer)
            if self._failures:
                failures, self._failures = self._failures, []
                stream, partition_key, code, detail = failures[0]
                raise KinesisProduceError(self.system, stream, partition_key, code, detail, failed=len(failures))

    def _record(self, stream: str, envelope: OutgoingMessageEnvelope) -> _Pending:
        data = envelope.message
        if data is None:
            raise KinesisSystemError(self.system, "a record needs data: Kinesis has no tombstones", stream=stream)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise KinesisSystemError(
                self.system, f"message must be bytes (serialized), got {type(data).__name__}", stream=stream
            )
        partition_key = _partition_key(envelope)
        if not 1 <= len(partition_key) <= 256:
            raise KinesisSystemError(
                self.system, f"partition key {partition_key[:40]!r}... is longer than 256 characters", stream=stream
            )
        explicit = None
        headers = envelope.headers
        if headers:
            raw = headers.get(EXPLICIT_HASH_KEY_HEADER)
            if raw is not None:
                explicit = _explicit_hash_key(self.system, stream, raw)
            if len(headers) > (raw is not None) and not self._warned_headers:
                self._warned_headers = True
                log.warning("Kinesis system '%s': records have no headers; headers other than %s are not written",
                            self.system, EXPLICIT_HASH_KEY_HEADER)  # fmt: skip
        data = bytes(data)
        size = len(data) + len(partition_key.encode("utf-8"))
        if size > MAX_RECORD_BYTES:
            raise KinesisProduceError(
                self.system, stream, partition_key, "RecordTooLarge", f"{size} bytes exceed Kinesis's 1 MiB per record"
            )
        return _Pending(data, partition_key, explicit, size)

    def _send_batch(self, stream: str, buffer: list[_Pending]) -> None:
        """One PutRecords call with the oldest buffered records; the failed ones stay in ``buffer``."""
        from botocore.exceptions import BotoCoreError, ClientError

        settings = self.settings
        batch: list[int] = []
        keys: set[str] = set()
        size = 0
        for index, record in enumerate(buffer):
            if len(batch) >= settings.producer_batch_records or (
                batch and size + record.size > settings.producer_batch_bytes
            ):
                break
            if settings.producer_preserve_key_order:
                if record.partition_key in keys:
                    continue
                keys.add(record.partition_key)
            batch.append(index)
            size += record.size
        try:
            response = self.clients.client.put_records(
                StreamName=stream, Records=[buffer[index].entry() for index in batch]
            )
        except ClientError as error:
            code = error_code(error)
            if is_throttling(error) or is_transient(error):
                if is_throttling(error):
                    self.metrics.throttled("PutRecords")
                else:
                    self.metrics.add("transient_errors")
                self._count_attempt(stream, buffer, batch, code, str(error))
                time.sleep(self._backoff.next_delay())
                return
            raise KinesisProduceError(
                self.system, stream, buffer[batch[0]].partition_key, code, str(error), failed=len(buffer)
            ) from None
        except BotoCoreError as error:
            self.metrics.add("transient_errors")
            self._count_attempt(stream, buffer, batch, type(error).__name__, str(error))
            time.sleep(self._backoff.next_delay())
            return
        self.metrics.add("put_records_calls")
        failed: set[int] = set()
        throttled = False
        for index, result in zip(batch, response.get("Records", []), strict=False):
            code = result.get("ErrorCode")
            if not code:
                continue
            failed.add(index)
            record = buffer[index]
            record.attempts += 1
            if code == "ProvisionedThroughputExceededException":
                throttled = True
                self.metrics.throttled("PutRecords")
            if record.attempts >= settings.producer_max_attempts:
                self._failures.append((stream, record.partition_key, code, result.get("ErrorMessage", "")))
        succeeded = len(batch) - len(failed)
        self.metrics.add("records_written", succeeded)
        if failed:
            self.metrics.add("records_retried", len(failed))
        sent = set(batch)
        buffer[:] = [
            record
            for index, record in enumerate(buffer)
            if index not in sent or (index in failed and record.attempts < settings.producer_max_attempts)
        ]
        self._buffered_bytes[stream] = sum(record.size for record in buffer)
        if failed:
            if throttled:
                log.debug("Kinesis stream '%s': %d record(s) throttled; retrying", stream, len(failed))
            time.sleep(self._backoff.next_delay())
        else:
            self._backoff.reset()

    def _count_attempt(self, stream: str, buffer: list[_Pending], batch: list[int], code: str, detail: str) -> None:
        """A whole call failed: every record in it used one attempt; drop those out of attempts."""
        exhausted = set()
        for index in batch:
            record = buffer[index]
            record.attempts += 1
            if record.attempts >= self.settings.producer_max_attempts:
                exhausted.add(index)
                self._failures.append((stream, record.partition_key, code, detail))
        if exhausted:
            buffer[:] = [record for index, record in enumerate(buffer) if index not in exhausted]
            self._buffered_bytes[stream] = sum(record.size for record in buffer)


def _partition_key(envelope: OutgoingMessageEnvelope) -> str:
    key = envelope.partition_key if envelope.partition_key is not None else envelope.key
    if key is None:
        return str(envelope.partition) if envelope.partition is not None else uuid.uuid4().hex
    if isinstance(key, str):
        return key
    if isinstance(key, bytes | bytearray | memoryview):
        raw = bytes(key)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.hex()
    return str(key)


def _explicit_hash_key(system: str, stream: str, raw: Any) -> str:
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes | bytearray) else str(raw)
    if not text.isdigit() or int(text) > MAX_HASH_KEY:
        raise KinesisSystemError(
            system, f"header '{EXPLICIT_HASH_KEY_HEADER}' must be a decimal integer in 0..2^128-1, got {text!r}",
            stream=stream,
        )  # fmt: skip
    return str(int(text))


def headers_with_explicit_hash_key(hash_key: int, headers: Mapping[str, bytes] | None = None) -> dict[str, bytes]:
    """Headers that make the producer write a record to the shard whose range holds ``hash_key``."""
    return {**(headers or {}), EXPLICIT_HASH_KEY_HEADER: str(hash_key).encode()}

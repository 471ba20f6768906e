"""One thread per leased shard: GetRecords within the shard's read limits, into the shard's slot.

The reader knows nothing of leases: it reads from the position its ownership started at until the
shard ends or it is told to stop (``OwnedShard.stop``), hands every batch to a ``RecordSink`` (the slot
queues, which refuse batches of a shard let go meanwhile), and reports back through the callbacks it
was given, so that the lease keeper decides what an ended or failed read means for the lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from millstream.connectors.kinesis.config import KinesisSystemConfig
from millstream.connectors.kinesis.errors import KinesisReadError
from millstream.connectors.kinesis.offsets import PositionType, ShardPosition
from millstream.connectors.kinesis.slots import OwnedShard, arrival_millis
from millstream.connectors.kinesis.throttling import (
    Backoff,
    KinesisMetrics,
    ShardReadLimiter,
    error_code,
    is_throttling,
    is_transient,
)

log = logging.getLogger(__name__)


class RecordSink(Protocol):
    """Where a reader puts what it read (``SlotQueues``); both return False when the reader must stop."""

    def wait_for_space(self, shard: OwnedShard) -> bool: ...

    def enqueue(self, shard: OwnedShard, records: list[dict[str, Any]]) -> bool: ...


class ShardReader:
    """Reads one leased shard into its slot, within the shard's read limits (one thread each)."""

    def __init__(
        self,
        system: str,
        shard: OwnedShard,
        *,
        settings: KinesisSystemConfig,
        client: Any,
        metrics: KinesisMetrics,
        sink: RecordSink,
        on_finished: Callable[[OwnedShard, bool], None],
        on_failed: Callable[[OwnedShard, BaseException], None],
    ) -> None:
        self.system = system
        self.shard = shard
        self.settings = settings
        self.client = client
        self.limiter = ShardReadLimiter(settings.calls_per_second, settings.bytes_per_second)
        self.backoff = Backoff(settings.backoff_initial_ms / 1000, settings.backoff_max_ms / 1000)
        self.metrics = metrics
        self.sink = sink
        self.on_finished = on_finished
        self.on_failed = on_failed
        self.skip_before_ms: int | None = None

    def run(self) -> None:
        """The thread's body: read, then report how it ended (``on_finished``) or why it failed (``on_failed``)."""
        ended = False
        try:
            ended = self._read()
        except BaseException as error:
            self.on_failed(self.shard, error)
            return
        self.on_finished(self.shard, ended)

    def _error(self, detail: str, sequence_number: str | None = None) -> KinesisReadError:
        return KinesisReadError(
            self.system,
            detail,
            stream=self.shard.stream,
            shard_id=self.shard.shard_id,
            sequence_number=sequence_number,
        )

    def _read(self) -> bool:
        """Read until the shard ends (True) or the reader is told to stop (False)."""
        from botocore.exceptions import BotoCoreError, ClientError

        shard = self.shard
        stop = shard.stop
        settings = self.settings
        iterator = self._iterator(shard.start)
        if iterator is None:
            return not stop.is_set()
        while not stop.is_set():
            if not self.sink.wait_for_space(shard):
                return False
            delay = self.limiter.delay()
            if delay > 0:
                self.metrics.add("limited_waits")
                self.metrics.add("limited_seconds", delay)
                if stop.wait(delay):
                    return False
            try:
                response = self.client.get_records(ShardIterator=iterator, Limit=settings.get_records_max)
            except ClientError as error:
                code = error_code(error)
                if is_throttling(error):
                    self.metrics.throttled("GetRecords")
                    self.limiter.record_call(0)
                    stop.wait(self.backoff.next_delay())
                    continue
                if code == "ExpiredIteratorException":
                    self.metrics.add("expired_iterators")
                    resume = (
                        ShardPosition.after_sequence_number(shard.last_enqueued)
                        if shard.last_enqueued is not None
                        else shard.start
                    )
                    iterator = self._iterator(resume)
                    if iterator is None:
                        return not stop.is_set()
                    continue
                if code == "ResourceNotFoundException":
                    log.warning(
                        "Kinesis shard '%s' of '%s' is gone (retention): finished", shard.shard_id, shard.stream
                    )
                    return True
                if is_transient(error):
                    self._transient(error)
                    continue
                raise self._error(f"GetRecords failed: {code}: {error}", shard.last_enqueued) from None
            except BotoCoreError as error:
                self._transient(error)
                continue
            self.backoff.reset()
            if (behind := response.get("MillisBehindLatest")) is not None:
                self.metrics.behind(shard.stream, shard.shard_id, int(behind))
            records = response.get("Records", [])
            size = 0
            for record in records:
                size += len(record["Data"])
            self.limiter.record_call(size)
            self.metrics.add("get_records_calls")
            if records:
                if self.skip_before_ms is not None:
                    records = self._skip_early(records)
                self.metrics.add("records_read", len(records))
                self.metrics.add("bytes_read", size)
                if records and not self.sink.enqueue(shard, records):
                    return False
            iterator = response.get("NextShardIterator")
            if iterator is None:
                return True
            if not records and stop.wait(settings.idle_ms / 1000):
                return False
        return False

    def _skip_early(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """AT_TIMESTAMP in the future was read as LATEST: drop records that arrived before it."""
        assert self.skip_before_ms is not None
        kept = [r for r in records if arrival_millis(r.get("ApproximateArrivalTimestamp")) >= self.skip_before_ms]
        if len(kept) < len(records) or not records:
            return kept
        self.skip_before_ms = None
        return kept

    def _transient(self, error: BaseException) -> None:
        self.metrics.add("transient_errors")
        log.warning(
            "Kinesis shard '%s' of '%s': GetRecords failed, retrying: %s", self.shard.shard_id, self.shard.stream, error
        )
        self.shard.stop.wait(self.backoff.next_delay())

    def _iterator(self, position: ShardPosition) -> str | None:
        """A shard iterator at ``position``; None when the shard is gone or the reader stopped."""
        from botocore.exceptions import BotoCoreError, ClientError

        shard = self.shard
        while not shard.stop.is_set():
            arguments: dict[str, Any] = {
                "StreamName": shard.stream,
                "ShardId": shard.shard_id,
                "ShardIteratorType": position.type.value,
            }
            if position.type in (PositionType.AT_SEQUENCE_NUMBER, PositionType.AFTER_SEQUENCE_NUMBER):
                arguments["StartingSequenceNumber"] = position.sequence_number
            elif position.type is PositionType.AT_TIMESTAMP:
                assert position.timestamp_ms is not None
                if position.timestamp_ms > int(time.time() * 1000):
                    arguments["ShardIteratorType"] = "LATEST"
                    self.skip_before_ms = position.timestamp_ms
                else:
                    arguments["Timestamp"] = datetime.fromtimestamp(position.timestamp_ms / 1000, tz=UTC)
            elif position.type is PositionType.SHARD_END:
                return None
            try:
                return str(self.client.get_shard_iterator(**arguments)["ShardIterator"])
            except ClientError as error:
                code = error_code(error)
                if is_throttling(error):
                    self.metrics.throttled("GetShardIterator")
                    shard.stop.wait(self.backoff.next_delay())
                elif is_transient(error):
                    self._transient(error)
                elif code == "ResourceNotFoundException":
                    log.warning(
                        "Kinesis shard '%s' of '%s' is gone (retention): finished", shard.shard_id, shard.stream
                    )
                    return None
                elif code == "InvalidArgumentException" and position.sequence_number is not None:
                    log.error(
                        "Kinesis shard '%s' of '%s': cannot start at %s (%s); starting at TRIM_HORIZON instead: "
                        "records between may have expired", shard.shard_id, shard.stream, position.describe(), error,
                    )  # fmt: skip
                    position = ShardPosition.trim_horizon()
                else:
                    raise self._error(
                        f"GetShardIterator at {position.describe()} failed: {code}: {error}", position.sequence_number
                    ) from None
            except BotoCoreError as error:
                self._transient(error)
        return None


__all__ = ["RecordSink", "ShardReader"]

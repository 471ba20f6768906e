"""Metadata and lifecycle of Kinesis streams, and what the engine sees of them: SSP slots.

**Partitions are slots, not shards.** Shards come and go while a job runs, and the engine's job model
is fixed for a generation, so a Kinesis stream reports ``open shards * job.container.count``
partitions: with the default grouper every container gets one SSP per shard open at job start, and
the consumer maps shards to those slots at run time (``allocation``). A restart after a split sizes
the slots to the new shard count. Any partition number of an existing stream has metadata
(``TRIM_HORIZON`` / ``LATEST`` sentinels): slots are virtual, so a container retried after a merge
still finds the slots of its generation.

**Offsets** are described in ``offsets``: composites of ``shardId:sequenceNumber@token``, compared on
the shards they share. ``offsets_after`` returns them unchanged: the consumer resumes from per-shard
checkpoints in its lease table, not from the task checkpoint.

**Startpoints** resolve to markers the consumer applies once, to every shard of the stream (Oldest →
TRIM_HORIZON, Upcoming → LATEST, Timestamp → AT_TIMESTAMP) or to the named shards (Specific →
AT_SEQUENCE_NUMBER; give ``shardId:sequenceNumber[,...]``).

Beyond the contract, the admin exposes shards with their lineage and hash-key ranges, the oldest and
newest sequence number of a shard, the sequence number at a timestamp, and splits and merges.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from millstream.connectors.kinesis.config import KinesisClients
from millstream.connectors.kinesis.errors import KinesisOffsetError, KinesisStreamNotActiveError, KinesisSystemError
from millstream.connectors.kinesis.offsets import (
    LATEST,
    TRIM_HORIZON,
    StartpointMarker,
    compare_offsets,
    is_sentinel,
    parse_offset,
    timestamp_offset,
)
from millstream.connectors.kinesis.shard_reads import read_shard
from millstream.connectors.kinesis.shards import Shard
from millstream.connectors.kinesis.throttling import KinesisMetrics, error_code
from millstream.contracts.systems import StreamSpec, SystemAdmin, SystemStreamMetadata, SystemStreamPartitionMetadata
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition

if TYPE_CHECKING:
    from millstream.contracts.startpoints import (
        Startpoint,
        StartpointCustom,
        StartpointOldest,
        StartpointSpecific,
        StartpointTimestamp,
        StartpointUpcoming,
    )

log = logging.getLogger(__name__)

SLOT_METADATA = SystemStreamPartitionMetadata(TRIM_HORIZON, LATEST, LATEST)
MAX_SCAN_CALLS = 1_000
"""GetRecords calls a position lookup (oldest, newest, at timestamp) makes at most per shard."""


@dataclass(frozen=True)
class StreamDescription:
    stream: str
    status: str
    open_shard_count: int
    retention_hours: int


@dataclass(frozen=True)
class ShardPositions:
    """The first and last sequence number a shard holds now (None: it holds no record)."""

    shard_id: str
    oldest_sequence_number: str | None
    newest_sequence_number: str | None
    closed: bool


class KinesisSystemAdmin(SystemAdmin):
    """``SystemAdmin`` of a Kinesis system, with the ``ShardedSystemAdmin`` capability (shard lineage and
    bounded shard reads, for DataFrame reads); thread-safe (boto3 clients are)."""

    partitions_are_fixed = False

    def __init__(
        self,
        system: str,
        clients: KinesisClients,
        *,
        container_count: int = 1,
        metrics: KinesisMetrics | None = None,
        active_timeout_s: float = 120.0,
    ) -> None:
        self.system = system
        self.clients = clients
        self.container_count = container_count
        self.metrics = metrics or KinesisMetrics()
        self.active_timeout_s = active_timeout_s

    def _call(self, operation: str, stream: str | None = None, **arguments: Any) -> Any:
        return self.clients.call(operation, self.metrics, stream=stream, **arguments)

    # ---- the SystemAdmin contract -------------------------------------------------------------

    def get_system_stream_metadata(self, streams: Iterable[str]) -> dict[str, SystemStreamMetadata]:
        result = {}
        for stream in streams:
            description = self.describe_stream(stream)
            if description is None:
                continue
            slots = max(1, description.open_shard_count) * self.container_count
            result[stream] = SystemStreamMetadata(stream, {slot: SLOT_METADATA for slot in range(slots)})
        return result

    def get_ssp_metadata(
        self, ssps: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        """Sentinel metadata for every slot of an existing stream, whatever its number (slots are virtual)."""
        ssps = list(ssps)
        existing = {stream for stream in {ssp.stream for ssp in ssps} if self.describe_stream(stream) is not None}
        return {ssp: SLOT_METADATA for ssp in ssps if ssp.stream in existing and ssp.partition >= 0}

    def offsets_after(self, offsets: Mapping[SystemStreamPartition, str]) -> dict[SystemStreamPartition, str]:
        for ssp, offset in offsets.items():
            self._check_offset(ssp.stream, offset)
        return dict(offsets)

    def _check_offset(self, stream: str, offset: str) -> None:
        if is_sentinel(offset) or offset.startswith("startpoint:"):
            return
        try:
            parse_offset(offset)
        except ValueError as error:
            raise KinesisOffsetError(self.system, stream, offset, str(error)) from None

    def offset_comparator(self, offset1: str, offset2: str) -> int | None:
        return compare_offsets(offset1, offset2)

    def offset_for_timestamp(self, ssp: SystemStreamPartition, timestamp_ms: int) -> str:
        """``AT_TIMESTAMP:<ms>``: a position in every shard of the slot's stream, resolved per shard."""
        return timestamp_offset(timestamp_ms)

    def create_stream(self, spec: StreamSpec) -> bool:
        """Create ``spec.physical_name`` with ``spec.partition_count`` shards and wait until it is ACTIVE."""
        from botocore.exceptions import ClientError

        try:
            self._call(
                "CreateStream", spec.physical_name, StreamName=spec.physical_name, ShardCount=spec.partition_count
            )
        except ClientError as error:
            if error_code(error) != "ResourceInUseException":
                raise self._error(spec.physical_name, "cannot create the stream", error) from None
            return False
        self.wait_for_active(spec.physical_name)
        return True

    def validate_stream(self, spec: StreamSpec) -> None:
        """The stream must exist; its shard count is not checked (it changes with resharding)."""
        if self.describe_stream(spec.physical_name) is None:
            from millstream.errors import StreamNotFoundError

            raise StreamNotFoundError(spec.system, spec.physical_name)

    def clear_stream(self, spec: StreamSpec) -> bool:
        """Delete the stream and wait until it is gone; False when it did not exist."""
        from botocore.exceptions import ClientError

        try:
            self._call("DeleteStream", spec.physical_name, StreamName=spec.physical_name)
        except ClientError as error:
            if error_code(error) == "ResourceNotFoundException":
                return False
            raise self._error(spec.physical_name, "cannot delete the stream", error) from None
        deadline = time.monotonic() + self.active_timeout_s
        while self.describe_stream(spec.physical_name) is not None:
            if time.monotonic() > deadline:
                raise KinesisStreamNotActiveError(self.system, "still deleting", stream=spec.physical_name)
            time.sleep(0.1)
        return True

    def list_streams(self) -> list[str]:
        names: list[str] = []
        arguments: dict[str, Any] = {}
        while True:
            response = self._call("ListStreams", **arguments)
            names.extend(response.get("StreamNames", []))
            if not response.get("HasMoreStreams") or not names:
                return sorted(names)
            arguments = {"ExclusiveStartStreamName": names[-1]}

    def resolve_startpoint(self, ssp: SystemStreamPartition, startpoint: Startpoint) -> str:
        """A marker the consumer applies once to the stream's shards (see the module docstring)."""
        return str(startpoint.apply(ssp, _StartpointResolver(self)))

    # ---- the ShardedSystemAdmin capability ----------------------------------------------------

    def shard_lineage(self, stream: str) -> list[Shard] | None:
        """Every shard Kinesis lists for ``stream`` (open and closed), by shard id; None when it does not exist."""
        if self.describe_stream(stream) is None:
            return None
        return self.list_shards(stream)

    @staticmethod
    def shard_offsets(offset: str) -> dict[str, str]:
        """Shard id → sequence number of ``shardId:sequenceNumber[,...]``; ValueError saying why if not one."""
        return {shard_id: entry.sequence_number for shard_id, entry in parse_offset(offset).items()}

    def read_shard(
        self,
        ssp: SystemStreamPartition,
        shard_id: str,
        start: Mapping[str, Any],
        ends_before: Callable[[str, int], bool],
    ) -> Iterator[list[IncomingMessageEnvelope]]:
        """A bounded read of ``shard_id`` (:mod:`millstream.connectors.kinesis.shard_reads`)."""
        return read_shard(self._call, self.system, ssp, shard_id, start, ends_before)

    # ---- Kinesis specifics ----------------------------------------------------------------------

    def describe_stream(self, stream: str) -> StreamDescription | None:
        """Status and open shard count of ``stream``; None when it does not exist."""
        from botocore.exceptions import ClientError

        try:
            summary = self._call("DescribeStreamSummary", stream, StreamName=stream)["StreamDescriptionSummary"]
        except ClientError as error:
            if error_code(error) == "ResourceNotFoundException":
                return None
            raise self._error(stream, "cannot describe the stream", error) from None
        if summary.get("StreamStatus") == "DELETING":
            return None
        return StreamDescription(
            stream, summary["StreamStatus"], int(summary.get("OpenShardCount", 0)), int(summary["RetentionPeriodHours"])
        )

    def wait_for_active(self, stream: str, timeout_s: float | None = None) -> None:
        deadline = time.monotonic() + (self.active_timeout_s if timeout_s is None else timeout_s)
        while True:
            description = self.describe_stream(stream)
            if description is not None and description.status == "ACTIVE":
                return
            if time.monotonic() > deadline:
                status = "missing" if description is None else description.status
                raise KinesisStreamNotActiveError(self.system, f"not ACTIVE in time ({status})", stream=stream)
            time.sleep(0.05)

    def list_shards(self, stream: str) -> list[Shard]:
        """Every shard Kinesis still lists (open ones, and closed ones within retention), with lineage."""
        from botocore.exceptions import ClientError

        shards: list[Shard] = []
        arguments: dict[str, Any] = {"StreamName": stream}
        try:
            while True:
                response = self._call("ListShards", stream, **arguments)
                shards.extend(Shard.from_api(shard) for shard in response.get("Shards", []))
                token = response.get("NextToken")
                if not token:
                    break
                arguments = {"NextToken": token}
        except ClientError as error:
            raise self._error(stream, "cannot list the shards", error) from None
        unique = {shard.shard_id: shard for shard in shards}
        return [unique[shard_id] for shard_id in sorted(unique)]

    def split_shard(self, stream: str, shard_id: str, new_starting_hash_key: int | None = None) -> None:
        """Split ``shard_id`` at ``new_starting_hash_key`` (default: the middle of its range); waits for ACTIVE."""
        shard = next((s for s in self.list_shards(stream) if s.shard_id == shard_id), None)
        if shard is None:
            raise KinesisSystemError(self.system, "no such shard to split", stream=stream, shard_id=shard_id)
        if new_starting_hash_key is None:
            new_starting_hash_key = (shard.starting_hash_key + shard.ending_hash_key + 1) // 2
        from botocore.exceptions import ClientError

        try:
            self._call(
                "SplitShard",
                stream,
                StreamName=stream,
                ShardToSplit=shard_id,
                NewStartingHashKey=str(new_starting_hash_key),
            )
        except ClientError as error:
            raise self._error(stream, f"cannot split shard '{shard_id}'", error) from None
        self.wait_for_active(stream)

    def merge_shards(self, stream: str, shard_id: str, adjacent_shard_id: str) -> None:
        """Merge two shards with adjacent hash-key ranges; waits for ACTIVE."""
        from botocore.exceptions import ClientError

        try:
            self._call(
                "MergeShards", stream, StreamName=stream, ShardToMerge=shard_id, AdjacentShardToMerge=adjacent_shard_id
            )
        except ClientError as error:
            raise self._error(stream, f"cannot merge shards '{shard_id}' and '{adjacent_shard_id}'", error) from None
        self.wait_for_active(stream)

    def shard_positions(self, stream: str, shard_id: str) -> ShardPositions:
        """The oldest and newest sequence number ``shard_id`` holds, found by reading it.

        Kinesis has no call for either. The oldest is the first record at TRIM_HORIZON; the newest is
        found by reading an open shard from ever earlier timestamps (10 s, 10 min, then everything)
        until a window holds a record, and a closed shard from its start. Reads are bounded by
        ``MAX_SCAN_CALLS`` calls; against a real stream this costs read throughput, so use it for
        tools, not per message.
        """
        shard = next((s for s in self.list_shards(stream) if s.shard_id == shard_id), None)
        if shard is None:
            raise KinesisSystemError(self.system, "no such shard", stream=stream, shard_id=shard_id)
        oldest = self._first_sequence(stream, shard_id, {"ShardIteratorType": "TRIM_HORIZON"})
        newest: str | None = None
        if oldest is not None:
            windows = [None] if shard.closed else [10_000, 600_000, None]
            for window in windows:
                start = (
                    {"ShardIteratorType": "TRIM_HORIZON"}
                    if window is None
                    else {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": _seconds(_now_ms() - window)}
                )
                newest = self._last_sequence(stream, shard_id, start)
                if newest is not None:
                    break
        return ShardPositions(shard_id, oldest, newest, shard.closed)

    def sequence_number_at(self, stream: str, shard_id: str, timestamp_ms: int) -> str | None:
        """The first sequence number of ``shard_id`` that arrived at or after ``timestamp_ms``; None if none."""
        if timestamp_ms > _now_ms():
            return None
        return self._first_sequence(
            stream, shard_id, {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": _seconds(timestamp_ms)}
        )

    def _records(self, stream: str, shard_id: str, start: Mapping[str, Any]) -> Iterable[list[dict[str, Any]]]:
        """Batches of records from ``start`` until the shard's end or its tip (bounded)."""
        from botocore.exceptions import ClientError

        try:
            iterator = self._call("GetShardIterator", stream, StreamName=stream, ShardId=shard_id, **start)[
                "ShardIterator"
            ]
            for _ in range(MAX_SCAN_CALLS):
                if iterator is None:
                    return
                response = self._call("GetRecords", stream, ShardIterator=iterator, Limit=10_000)
                records = response.get("Records", [])
                yield records
                iterator = response.get("NextShardIterator")
                if not records and response.get("MillisBehindLatest", 0) == 0:
                    return
        except ClientError as error:
            raise self._error(stream, f"cannot read shard '{shard_id}'", error) from None

    def _first_sequence(self, stream: str, shard_id: str, start: Mapping[str, Any]) -> str | None:
        for records in self._records(stream, shard_id, start):
            if records:
                return str(records[0]["SequenceNumber"])
        return None

    def _last_sequence(self, stream: str, shard_id: str, start: Mapping[str, Any]) -> str | None:
        last = None
        for records in self._records(stream, shard_id, start):
            if records:
                last = str(records[-1]["SequenceNumber"])
        return last

    def _error(self, stream: str, what: str, error: Exception) -> KinesisSystemError:
        return KinesisSystemError(
            self.system, f"{what}: {error_code(error) or type(error).__name__}: {error}", stream=stream
        )


def _now_ms() -> int:
    return int(time.time() * 1000)


def _seconds(timestamp_ms: int) -> datetime:
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)


class _StartpointResolver:
    """Startpoints → markers the consumer applies (it owns the per-shard positions)."""

    def __init__(self, admin: KinesisSystemAdmin) -> None:
        self.admin = admin

    def visit_specific(self, ssp: SystemStreamPartition, startpoint: StartpointSpecific) -> str:
        try:
            entries = parse_offset(startpoint.specific_offset)
        except ValueError as error:
            raise KinesisOffsetError(
                self.admin.system,
                ssp.stream,
                startpoint.specific_offset,
                f"{error}; a Specific startpoint of a Kinesis stream names shardId:sequenceNumber[,...]",
            ) from None
        positions = {shard: entry.sequence_number for shard, entry in entries.items()}
        return str(StartpointMarker("specific", startpoint.creation_timestamp, positions=positions))

    def visit_timestamp(self, ssp: SystemStreamPartition, startpoint: StartpointTimestamp) -> str:
        return str(
            StartpointMarker("timestamp", startpoint.creation_timestamp, timestamp_ms=startpoint.timestamp_offset)
        )

    def visit_oldest(self, ssp: SystemStreamPartition, startpoint: StartpointOldest) -> str:
        return str(StartpointMarker("oldest", startpoint.creation_timestamp))

    def visit_upcoming(self, ssp: SystemStreamPartition, startpoint: StartpointUpcoming) -> str:
        return str(StartpointMarker("upcoming", startpoint.creation_timestamp))

    def visit_custom(self, ssp: SystemStreamPartition, startpoint: StartpointCustom) -> str:
        raise KinesisSystemError(
            self.admin.system, f"{type(startpoint).__name__} is not a startpoint Kinesis supports", stream=ssp.stream
        )

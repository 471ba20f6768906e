"""Building blocks of the Kinesis unit tests: owned shards and GetRecords records without a server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from millstream.connectors.kinesis.leases import Lease, StoredLease
from millstream.connectors.kinesis.offsets import ShardPosition
from millstream.connectors.kinesis.slots import OwnedShard
from millstream.model import SystemStreamPartition

SYSTEM = "kinesis"
STREAM = "events"


def slot(partition: int) -> SystemStreamPartition:
    return SystemStreamPartition(SYSTEM, STREAM, partition)


def owned(shard_id: str, partition: int = 0, token: int = 1) -> OwnedShard:
    """A shard held with lease token ``token``, mapped to slot ``partition``, read from TRIM_HORIZON."""
    lease = Lease(shard_id, "me", 0, token, ShardPosition.trim_horizon())
    return OwnedShard(STREAM, shard_id, slot(partition), StoredLease(lease, lease.to_bytes()), lease.position, 0.0)


def records(*sequences: int, key: str = "k") -> list[dict[str, Any]]:
    """GetRecords records with these sequence numbers; the data names the sequence number."""
    return [{"SequenceNumber": str(s), "Data": f"r{s}".encode(), "PartitionKey": key} for s in sequences]


def in_thread(target: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``target`` in a daemon thread; its return value lands in the list."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(target()), daemon=True)
    thread.start()
    return thread, result

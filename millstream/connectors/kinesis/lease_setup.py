"""Where the shards of a stream start, set in the lease table before any lease is taken.

Runs once per stream when a consumer starts, before its lease keeper: the job's first start gives
every listed shard a lease at the configured initial position, and each startpoint marker registered
with the consumer resets positions once. Both leave a marker record in the table, so the containers of
a job that start together (or restart) apply each of them exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from millstream.connectors.kinesis.errors import KinesisSystemError
from millstream.connectors.kinesis.leases import Lease, LeaseTable
from millstream.connectors.kinesis.offsets import PositionType, ShardPosition, StartpointMarker
from millstream.connectors.kinesis.shards import Shard, ShardLineage

log = logging.getLogger(__name__)


class LeaseSetup:
    """Initial positions and startpoints of the streams of one consumer (``worker_id`` signs the markers)."""

    def __init__(self, system: str, application: str, worker_id: str) -> None:
        self.system = system
        self.application = application
        self.worker_id = worker_id

    def prepare(
        self, table: LeaseTable, lineage: ShardLineage, initial: ShardPosition, markers: Iterable[StartpointMarker]
    ) -> None:
        """Initialize the table at the job's first start, then apply ``markers``, oldest first."""
        self.initialize(table, lineage, initial)
        for marker in sorted(markers, key=lambda m: m.created_ms):
            self.apply_startpoint(table, lineage, marker)

    def initialize(self, table: LeaseTable, lineage: ShardLineage, initial: ShardPosition) -> None:
        """At the job's first start, give every listed shard a lease at the configured initial position.

        LATEST reads only what arrives from now on, so shards already closed count as finished then.
        Shards appearing later are children of these and start at TRIM_HORIZON.
        """
        if table.marker("init") is not None:
            return
        for shard in lineage.shards.values():
            position = initial
            if position.type is PositionType.LATEST and shard.closed:
                position = ShardPosition.shard_end()
            lease = Lease(shard.shard_id, None, 0, 0, position, shard.parents, shard.starting_sequence_number)
            table.write(lease, None)
        table.put_marker("init", {"position": initial.to_json(), "worker": self.worker_id})
        log.info(
            "Kinesis system '%s' stream '%s': first start of '%s', %d shard(s) from %s",
            self.system, table.stream, self.application, len(lineage), initial.describe(),
        )  # fmt: skip

    def apply_startpoint(self, table: LeaseTable, lineage: ShardLineage, marker: StartpointMarker) -> None:
        """Reset shard positions as ``marker`` says, once (a marker record remembers it was applied).

        Oldest, Upcoming and Timestamp reset every listed shard (owners lose their leases: the token
        moves); Specific resets the shards it names. The shards then follow the lineage rules again.
        """
        name = f"startpoint-{marker.identity}"
        if table.marker(name) is not None:
            return
        targets = self._targets(table.stream, lineage, marker)
        for shard_id, position in sorted(targets.items()):
            self._reset_lease(table, lineage.shards[shard_id], position)
        table.put_marker(name, {"startpoint": str(marker), "worker": self.worker_id})
        log.info(
            "Kinesis system '%s' stream '%s': applied startpoint %s to %d shard(s)",
            self.system, table.stream, marker, len(targets),
        )  # fmt: skip

    def _targets(self, stream: str, lineage: ShardLineage, marker: StartpointMarker) -> dict[str, ShardPosition]:
        if marker.kind == "specific":
            assert marker.positions is not None
            unknown = sorted(set(marker.positions) - set(lineage.shards))
            if unknown:
                raise KinesisSystemError(
                    self.system, f"the Specific startpoint {marker} names shard '{unknown[0]}', which is not listed",
                    stream=stream, shard_id=unknown[0],
                )  # fmt: skip
            return {shard: ShardPosition.at_sequence_number(seq) for shard, seq in marker.positions.items()}
        targets = {}
        for shard in lineage.shards.values():
            if marker.kind == "oldest":
                targets[shard.shard_id] = ShardPosition.trim_horizon()
            elif marker.kind == "timestamp":
                assert marker.timestamp_ms is not None
                targets[shard.shard_id] = ShardPosition.at_timestamp(marker.timestamp_ms)
            else:
                targets[shard.shard_id] = ShardPosition.shard_end() if shard.closed else ShardPosition.latest()
        return targets

    def _reset_lease(self, table: LeaseTable, shard: Shard, position: ShardPosition) -> None:
        for _ in range(100):
            current = table.get(shard.shard_id)
            if current is None:
                lease = Lease(shard.shard_id, None, 0, 1, position, shard.parents, shard.starting_sequence_number)
            else:
                lease = current.lease.next(
                    owner=None,
                    token=current.lease.token + 1,
                    position=position,
                    shard_start=shard.starting_sequence_number,
                )
            if table.write(lease, None if current is None else current.data) is not None:
                return
        raise KinesisSystemError(
            self.system, "cannot reset the lease: it keeps changing", stream=table.stream, shard_id=shard.shard_id
        )


__all__ = ["LeaseSetup"]

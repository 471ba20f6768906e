"""A log partition's offsets as the ``SystemAdmin`` contract reports them, shared by the admin and by a consumer
that describes the partitions it is about to read (``LogSystemConsumer.describe``): both answer alike."""

from __future__ import annotations

from millstream.contracts.systems import SystemStreamPartitionMetadata
from millstream.embedded.log.expiry import Reaper
from millstream.embedded.log.storage import LogPartition, PartitionState


def partition_metadata(state: PartitionState) -> SystemStreamPartitionMetadata:
    if state.oldest >= state.upcoming:
        return SystemStreamPartitionMetadata(None, None, str(state.upcoming), state.sealed)
    return SystemStreamPartitionMetadata(str(state.oldest), str(state.upcoming - 1), str(state.upcoming), state.sealed)


def written_metadata(state: PartitionState) -> SystemStreamPartitionMetadata:
    """``partition_metadata`` as the partition's writers see it: open transactions' records included."""
    return partition_metadata(PartitionState(state.oldest, max(state.written, state.upcoming), state.sealed))


def settled_metadata(log: LogPartition, reaper: Reaper) -> SystemStreamPartitionMetadata:
    """The readers' offsets once a transaction past its deadline that held the stable end was ended (``expiry``):
    offsets reported never stay behind a writer that is gone."""
    state = log.state()
    if not state.settled and reaper.settle(log):
        state = log.state()
    return partition_metadata(state)

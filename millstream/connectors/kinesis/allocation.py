"""Shard ↔ SSP slots of one stream in one container (the proposal's ShardPartitionMapper).

The job model gives each container a fixed set of SSPs of a Kinesis stream — its *slots*, one per
shard open at job start (see ``admin``). Shards come and go at run time (splits, merges, leases moving
between containers), so a shard the container starts reading takes a slot, and gives it back when it
ends or moves away:

* a free slot (no shard) is taken first, the lowest partition first;
* when none is free — more shards than slots, after a split or while another container is away —
  the shard **shares** the slot holding the fewest shards. The slot's offset then names every shard
  mapped to it (``offsets``), so one checkpoint of the SSP covers all of them: no container failure,
  no restart. A restart sizes the slots to the shards again.

Not durable: a restart builds the mapping anew; per-shard positions live in the lease table.
Not thread-safe by itself: the consumer calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Iterable

from millstream.errors import MillstreamError
from millstream.model import SystemStreamPartition


class SlotAllocationError(MillstreamError):
    """A shard released twice, or allocated twice: a bug in the caller, named by shard and stream."""


class SlotAllocator:
    def __init__(self, stream: str, slots: Iterable[SystemStreamPartition]) -> None:
        self.stream = stream
        self.slots: list[SystemStreamPartition] = sorted(slots, key=lambda ssp: ssp.partition)
        if not self.slots:
            raise SlotAllocationError(f"Kinesis stream '{stream}' has no SSP slot in this container")
        self._shards: dict[SystemStreamPartition, list[str]] = {ssp: [] for ssp in self.slots}
        self._slot_of: dict[str, SystemStreamPartition] = {}

    def allocate(self, shard_id: str) -> SystemStreamPartition:
        """The slot ``shard_id`` is mapped to from now on: a free one, else the least shared one."""
        if shard_id in self._slot_of:
            raise SlotAllocationError(f"shard '{shard_id}' of Kinesis stream '{self.stream}' already has a slot")
        slot = min(self.slots, key=lambda ssp: (len(self._shards[ssp]), ssp.partition))
        self._shards[slot].append(shard_id)
        self._slot_of[shard_id] = slot
        return slot

    def release(self, shard_id: str) -> SystemStreamPartition:
        """Unmap ``shard_id``; its slot is free again once no other shard shares it."""
        slot = self._slot_of.pop(shard_id, None)
        if slot is None:
            raise SlotAllocationError(f"shard '{shard_id}' of Kinesis stream '{self.stream}' holds no slot")
        self._shards[slot].remove(shard_id)
        return slot

    def slot_of(self, shard_id: str) -> SystemStreamPartition | None:
        return self._slot_of.get(shard_id)

    def shards_of(self, slot: SystemStreamPartition) -> list[str]:
        return list(self._shards.get(slot, ()))

    @property
    def free_slots(self) -> list[SystemStreamPartition]:
        return [ssp for ssp in self.slots if not self._shards[ssp]]

    @property
    def shared_slots(self) -> list[SystemStreamPartition]:
        return [ssp for ssp in self.slots if len(self._shards[ssp]) > 1]

    def mapping(self) -> dict[SystemStreamPartition, list[str]]:
        return {ssp: list(shards) for ssp, shards in self._shards.items()}

"""Shards and their lineage: which shards a split or merge closed, and which it opened.

A split closes one shard and opens two children whose ``parent_shard_id`` is it; a merge closes two
adjacent shards and opens one child with both as ``parent_shard_id`` and
``adjacent_parent_shard_id``. A record's partition key hashes (MD5, 128 bits) into exactly one open
shard's hash-key range, so the records of a key move from a parent to exactly one child: reading a
child only after its parents are finished keeps every key's records in order.

A parent that retention has removed from the listing no longer holds records; it counts as finished.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shard:
    """One shard as ``ListShards`` describes it."""

    shard_id: str
    parent_shard_id: str | None
    adjacent_parent_shard_id: str | None
    starting_hash_key: int
    ending_hash_key: int
    starting_sequence_number: str
    ending_sequence_number: str | None = None
    """Set once the shard is closed (split, merged): no record will be added to it."""

    @property
    def closed(self) -> bool:
        return self.ending_sequence_number is not None

    @property
    def parents(self) -> tuple[str, ...]:
        return tuple(p for p in (self.parent_shard_id, self.adjacent_parent_shard_id) if p)

    def contains_hash_key(self, hash_key: int) -> bool:
        return self.starting_hash_key <= hash_key <= self.ending_hash_key

    @classmethod
    def from_api(cls, shard: Mapping[str, Any]) -> Shard:
        hash_range = shard["HashKeyRange"]
        sequence_range = shard["SequenceNumberRange"]
        return cls(
            shard_id=shard["ShardId"],
            parent_shard_id=shard.get("ParentShardId"),
            adjacent_parent_shard_id=shard.get("AdjacentParentShardId"),
            starting_hash_key=int(hash_range["StartingHashKey"]),
            ending_hash_key=int(hash_range["EndingHashKey"]),
            starting_sequence_number=sequence_range["StartingSequenceNumber"],
            ending_sequence_number=sequence_range.get("EndingSequenceNumber"),
        )


def hash_key_of(partition_key: str) -> int:
    """The 128-bit hash key Kinesis derives from a partition key (MD5, big-endian)."""
    return int.from_bytes(hashlib.md5(partition_key.encode("utf-8")).digest(), "big")


class ShardLineage:
    """The shards of one stream as last listed, with parent → child links."""

    def __init__(self, shards: Iterable[Shard]) -> None:
        self.shards: dict[str, Shard] = {shard.shard_id: shard for shard in shards}
        self._children: dict[str, list[str]] = {}
        for shard in self.shards.values():
            for parent in shard.parents:
                self._children.setdefault(parent, []).append(shard.shard_id)

    def __contains__(self, shard_id: object) -> bool:
        return shard_id in self.shards

    def __len__(self) -> int:
        return len(self.shards)

    def listed_parents(self, shard_id: str) -> list[str]:
        """The parents of ``shard_id`` still in the listing (the others expired: nothing left to read)."""
        shard = self.shards.get(shard_id)
        return [] if shard is None else [p for p in shard.parents if p in self.shards]

    def children(self, shard_id: str) -> list[str]:
        return sorted(self._children.get(shard_id, []))

    def descendants(self, shard_id: str) -> set[str]:
        found: set[str] = set()
        pending = [shard_id]
        while pending:
            for child in self._children.get(pending.pop(), []):
                if child not in found:
                    found.add(child)
                    pending.append(child)
        return found

    def open_shards(self) -> list[Shard]:
        return [shard for shard in self.shards.values() if not shard.closed]

    def shard_for_key(self, partition_key: str) -> Shard | None:
        """The open shard a record with ``partition_key`` is written to now."""
        hash_key = hash_key_of(partition_key)
        for shard in self.open_shards():
            if shard.contains_hash_key(hash_key):
                return shard
        return None

"""Partition choice: pinned partitions, stable key hashing across processes, round-robin for keyless."""

from __future__ import annotations

import zlib

import pytest

from millstream.embedded.log.errors import LogSystemError
from millstream.embedded.log.partitioner import Partitioner, partition_for_key

from .conftest import envelope


def test_key_hashing_is_crc32_modulo_the_partition_count() -> None:
    assert zlib.crc32(b"alice") == 663_665_735  # pinned: a change would move every key of existing streams
    assert partition_for_key(b"alice", 7) == 663_665_735 % 7 == 5


def test_the_same_key_always_gets_the_same_partition_from_any_partitioner() -> None:
    choices = {Partitioner().partition(envelope("s", b"v", b"user-42"), 16) for _ in range(10)}
    assert choices == {partition_for_key(b"user-42", 16)}


def test_the_partition_key_is_hashed_instead_of_the_key() -> None:
    chosen = Partitioner().partition(envelope("s", b"v", b"key", partition_key=b"pk"), 16)
    assert chosen == partition_for_key(b"pk", 16)


def test_a_pinned_partition_is_used_as_is() -> None:
    assert Partitioner().partition(envelope("s", b"v", b"key", partition_key=b"pk", partition=3), 4) == 3


@pytest.mark.parametrize("pinned", [-1, 4])
def test_a_pinned_partition_outside_the_stream_is_refused(pinned: int) -> None:
    with pytest.raises(LogSystemError, match=f"'s' has partitions 0..3; an envelope asked for partition {pinned}"):
        Partitioner().partition(envelope("s", b"v", partition=pinned), 4)


def test_keyless_envelopes_visit_every_partition_once_per_round() -> None:
    partitioner = Partitioner()
    chosen = [partitioner.partition(envelope("s", b"v"), 5) for _ in range(10)]
    assert sorted(chosen[:5]) == sorted(chosen[5:]) == [0, 1, 2, 3, 4]


def test_round_robin_is_kept_per_stream() -> None:
    partitioner = Partitioner()
    first_a = partitioner.partition(envelope("a", b"v"), 3)
    partitioner.partition(envelope("b", b"v"), 3)
    assert partitioner.partition(envelope("a", b"v"), 3) == (first_a + 1) % 3


def test_a_partition_key_that_is_not_bytes_is_refused_naming_the_stream() -> None:
    with pytest.raises(LogSystemError, match=r"'s': the partition key must be bytes.*got str"):
        Partitioner().partition(envelope("s", b"v", partition_key="text"), 4)

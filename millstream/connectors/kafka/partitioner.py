"""Kafka's default partitioner, in Python, for partition keys librdkafka never sees.

A keyed message is partitioned by librdkafka itself (``partitioner=murmur2_random``: the Java
client's ``murmur2(key) & 0x7fffffff % partitions``), so millstream and Java producers put the same
key in the same partition. When an envelope carries a ``partition_key`` distinct from its key, the
partition is computed here with the same function and passed explicitly.
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """``org.apache.kafka.common.utils.Utils.murmur2`` as a signed 32-bit integer."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    blocks = length // 4
    for index in range(blocks):
        i = index * 4
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length & 3
    base = blocks * 4
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partition_count: int) -> int:
    """The partition the Java client's ``BuiltInPartitioner.partitionForKey`` chooses for ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partition_count

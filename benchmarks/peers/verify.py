"""Checking a contender's output: the count, and each key's messages or counts.

Pure functions over what was read, so the checks are unit-tested without a broker; ``read_output``
is the one function here that talks to Kafka.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from confluent_kafka import Consumer, TopicPartition


class OutputMismatchError(AssertionError):
    """A contender's output is not what its workload must produce; the message names the topic and the
    first key at fault."""


class OutputRecord(NamedTuple):
    """One output message (a tuple: a million of them are built per verified run)."""

    key: bytes
    value: bytes
    timestamp_ms: int
    partition: int
    offset: int


def expected_counts(messages: int, keys: int) -> Counter[bytes]:
    """Messages per key of the input the workload writes (message ``i`` has key ``i % keys``)."""
    counts: Counter[bytes] = Counter()
    for key in range(keys):
        counts[key_bytes(key)] = messages // keys + (1 if key < messages % keys else 0)
    return counts


def key_bytes(key: int) -> bytes:
    return b"key-%06d" % key


def verify_passthrough(topic: str, records: Sequence[OutputRecord], expected: Counter[bytes]) -> None:
    """W1: exactly the input's messages per key (at-least-once may not duplicate on a clean run)."""
    if len(records) != sum(expected.values()):
        raise OutputMismatchError(f"{topic}: {len(records):,} messages, expected {sum(expected.values()):,}")
    got = Counter(record.key for record in records)
    _compare_per_key(topic, got, expected, "messages")


def verify_counts(topic: str, records: Sequence[OutputRecord], expected: Counter[bytes]) -> None:
    """W2: one (key, count) per input message; each key's counts are exactly 1..n for its n messages."""
    if len(records) != sum(expected.values()):
        raise OutputMismatchError(f"{topic}: {len(records):,} counts, expected {sum(expected.values()):,}")
    seen: dict[bytes, list[int]] = {}
    for record in records:
        try:
            seen.setdefault(record.key, []).append(int(record.value))
        except ValueError:
            raise OutputMismatchError(
                f"{topic} partition {record.partition} offset {record.offset}: key {record.key!r} has value "
                f"{record.value[:40]!r}, not a count"
            ) from None
    _compare_per_key(topic, Counter({key: len(counts) for key, counts in seen.items()}), expected, "counts")
    for key, counts in seen.items():
        if sorted(counts) != list(range(1, expected[key] + 1)):
            raise OutputMismatchError(
                f"{topic}: key {key!r} counted {_summary(sorted(counts))}, expected 1..{expected[key]} once each"
            )


def _summary(counts: list[int]) -> str:
    return ", ".join(map(str, counts)) if len(counts) <= 6 else f"{counts[:3]} ... {counts[-3:]}"


def _compare_per_key(topic: str, got: Counter[bytes], expected: Counter[bytes], what: str) -> None:
    for key in sorted(set(got) | set(expected)):
        if got[key] != expected[key]:
            raise OutputMismatchError(f"{topic}: key {key!r} has {got[key]} {what}, expected {expected[key]}")


def read_output(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> list[OutputRecord]:
    """Every message of ``topic`` (end offsets read first, so a contender still writing is an error
    later, not a wait here), with the broker's append time. Reading ends when every partition's position
    reaches its end offset, not after a count of messages: transactional writers (millstream's, Kafka
    Streams') leave a commit marker at an offset of its own."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "peer-verify", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
        assigned = [TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0]
        consumer.assign(assigned)
        records: list[OutputRecord] = []
        last_progress = time.monotonic()
        while behind := _offsets_to_go(consumer, assigned, ends):
            batch = consumer.consume(min(10_000, behind), 1.0)
            if batch:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > timeout:
                raise OutputMismatchError(f"{topic}: reading back stalled with {behind:,} offsets to go")
            for message in batch:
                if message.error() is not None:
                    continue
                key, value, partition, offset = message.key(), message.value(), message.partition(), message.offset()
                records.append(
                    OutputRecord(key or b"", value or b"", message.timestamp()[1], partition or 0, offset or 0)
                )
        return records
    finally:
        consumer.close()


def _offsets_to_go(consumer: Consumer, assigned: list[TopicPartition], ends: dict[int, int]) -> int:
    """Offsets between each partition's position and its end (a position not known yet counts from 0)."""
    return sum(max(0, ends[tp.partition] - max(tp.offset, 0)) for tp in consumer.position(assigned))

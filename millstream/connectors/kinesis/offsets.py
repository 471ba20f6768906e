"""Positions in a shard, and the offset strings a Kinesis SSP carries.

**Offsets.** An SSP of a Kinesis stream is a *slot* that one or more shards are mapped to (see
``allocation``), so its offset names a position in each of them: the last sequence number delivered
of every shard mapped to the slot when the envelope was enqueued::

    shardId-000000000003:49590338271490256608559692538361571095921575989136588898@2
    shardId-000000000003:4959...898@2,shardId-000000000006:4960...017@1     (a shared slot)

Entries are sorted by shard id. ``@2`` is the *lease token*: which acquisition of the shard's lease
delivered the record (it grows by one with every change of owner or reset). A checkpointed offset
therefore says "these records were processed", and the consumer applies an entry to its per-shard
checkpoint only when the token is that of its own current lease — an entry left over from an earlier
owner, or from before a startpoint rewound the shard, can never move a checkpoint. Because entries
are computed at enqueue time and a slot's queue is FIFO, every entry of an envelope's offset names a
record delivered no later than the envelope itself: when the envelope is processed, so were they.

Users may write the token-less form ``shardId:sequenceNumber[,...]`` (a Specific startpoint).

**Order.** Two offsets compare on the shards they share, by sequence number (decimal integers,
ordered within a shard): equal on all → 0 when they name the same shards; all ≤ → -1; all ≥ → 1;
anything else (no shard in common, or one shard ahead and another behind) is incomparable (None).

**Sentinels.** ``TRIM_HORIZON`` and ``LATEST`` are the oldest and upcoming offsets a slot reports;
``AT_TIMESTAMP:<ms>`` is what ``offset_for_timestamp`` answers; ``startpoint:...`` is what
``resolve_startpoint`` answers (see :class:`StartpointMarker`). None of them is a read position of a
shard by itself: the consumer keeps per-shard positions in its lease table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

TRIM_HORIZON = "TRIM_HORIZON"
LATEST = "LATEST"
AT_TIMESTAMP_PREFIX = "AT_TIMESTAMP:"
STARTPOINT_PREFIX = "startpoint:"

_SHARD_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_SEQUENCE = re.compile(r"[0-9]{1,128}")


class PositionType(StrEnum):
    """Where reading a shard starts: Kinesis's shard-iterator types, plus the end of a finished shard."""

    TRIM_HORIZON = "TRIM_HORIZON"
    LATEST = "LATEST"
    AT_TIMESTAMP = "AT_TIMESTAMP"
    AT_SEQUENCE_NUMBER = "AT_SEQUENCE_NUMBER"
    AFTER_SEQUENCE_NUMBER = "AFTER_SEQUENCE_NUMBER"
    SHARD_END = "SHARD_END"
    """Every record of the (closed) shard was processed and checkpointed: its children may be read."""


@dataclass(frozen=True)
class ShardPosition:
    """A position in one shard. A checkpoint is ``AFTER_SEQUENCE_NUMBER`` of the last processed record."""

    type: PositionType
    sequence_number: str | None = None
    timestamp_ms: int | None = None

    @classmethod
    def trim_horizon(cls) -> ShardPosition:
        return cls(PositionType.TRIM_HORIZON)

    @classmethod
    def latest(cls) -> ShardPosition:
        return cls(PositionType.LATEST)

    @classmethod
    def shard_end(cls) -> ShardPosition:
        return cls(PositionType.SHARD_END)

    @classmethod
    def at_timestamp(cls, timestamp_ms: int) -> ShardPosition:
        return cls(PositionType.AT_TIMESTAMP, timestamp_ms=int(timestamp_ms))

    @classmethod
    def at_sequence_number(cls, sequence_number: str) -> ShardPosition:
        return cls(PositionType.AT_SEQUENCE_NUMBER, sequence_number=sequence_number)

    @classmethod
    def after_sequence_number(cls, sequence_number: str) -> ShardPosition:
        return cls(PositionType.AFTER_SEQUENCE_NUMBER, sequence_number=sequence_number)

    @property
    def is_shard_end(self) -> bool:
        return self.type is PositionType.SHARD_END

    @property
    def checkpointed_sequence_number(self) -> int | None:
        """The last processed sequence number this position implies, if it implies one."""
        if self.type is PositionType.AFTER_SEQUENCE_NUMBER and self.sequence_number is not None:
            return int(self.sequence_number)
        return None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"type": self.type.value}
        if self.sequence_number is not None:
            document["seq"] = self.sequence_number
        if self.timestamp_ms is not None:
            document["ms"] = self.timestamp_ms
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> ShardPosition:
        position = cls(
            PositionType(document["type"]),
            None if document.get("seq") is None else str(document["seq"]),
            None if document.get("ms") is None else int(document["ms"]),
        )
        needs_sequence = position.type in (PositionType.AT_SEQUENCE_NUMBER, PositionType.AFTER_SEQUENCE_NUMBER)
        if needs_sequence and not (position.sequence_number and _SEQUENCE.fullmatch(position.sequence_number)):
            raise ValueError(f"{position.type.value} needs a sequence number, got {position.sequence_number!r}")
        if position.type is PositionType.AT_TIMESTAMP and position.timestamp_ms is None:
            raise ValueError("AT_TIMESTAMP needs a timestamp")
        return position

    def describe(self) -> str:
        if self.sequence_number is not None:
            return f"{self.type.value} {self.sequence_number}"
        if self.timestamp_ms is not None:
            return f"{self.type.value} {self.timestamp_ms}"
        return self.type.value


@dataclass(frozen=True)
class ShardOffset:
    """One entry of an offset: a shard, the sequence number of a record in it, and the lease token."""

    shard_id: str
    sequence_number: str
    lease_token: int | None = None

    def __str__(self) -> str:
        text = f"{self.shard_id}:{self.sequence_number}"
        return text if self.lease_token is None else f"{text}@{self.lease_token}"


def format_offset(entries: Mapping[str, ShardOffset]) -> str:
    """The offset string of a slot whose shards were last delivered at ``entries`` (shard id → entry)."""
    return ",".join(str(entries[shard]) for shard in sorted(entries))


def parse_offset(offset: str) -> dict[str, ShardOffset]:
    """Shard id → entry of an offset string; ValueError (saying why) when it is not one."""
    if not offset:
        raise ValueError("it is empty")
    entries: dict[str, ShardOffset] = {}
    for part in offset.split(","):
        shard, sep, rest = part.strip().partition(":")
        if not sep or not _SHARD_ID.fullmatch(shard):
            raise ValueError(f"'{part}' is not shardId:sequenceNumber")
        sequence, at, token = rest.partition("@")
        if not _SEQUENCE.fullmatch(sequence):
            raise ValueError(f"'{sequence}' in '{part}' is not a sequence number (decimal digits)")
        if at and not token.isdigit():
            raise ValueError(f"'{token}' in '{part}' is not a lease token (a non-negative integer)")
        if shard in entries:
            raise ValueError(f"shard '{shard}' appears twice")
        entries[shard] = ShardOffset(shard, sequence, int(token) if at else None)
    return entries


def compare_offsets(offset1: str, offset2: str) -> int | None:
    """The partial order described in the module docstring; None when incomparable or not offsets."""
    try:
        first, second = parse_offset(offset1), parse_offset(offset2)
    except ValueError:
        return None
    common = first.keys() & second.keys()
    if not common:
        return None
    signs = {_sign(int(first[s].sequence_number) - int(second[s].sequence_number)) for s in common}
    if signs == {0}:
        if first.keys() == second.keys():
            return 0
        return None
    if signs <= {-1, 0}:
        return -1
    if signs <= {0, 1}:
        return 1
    return None


def _sign(value: int) -> int:
    return (value > 0) - (value < 0)


def timestamp_offset(timestamp_ms: int) -> str:
    return f"{AT_TIMESTAMP_PREFIX}{int(timestamp_ms)}"


@dataclass(frozen=True)
class StartpointMarker:
    """A startpoint as the consumer receives it through ``register``: what to do, and its identity.

    ``kind`` is ``oldest``, ``upcoming``, ``timestamp`` (``timestamp_ms``) or ``specific``
    (``positions``: shard id → sequence number to start at, inclusive). ``created_ms`` (the
    startpoint's creation time) makes it one-shot: the consumer records each applied marker in the
    lease table, so a restart before the startpoint was deleted does not apply it again.
    """

    kind: str
    created_ms: int
    timestamp_ms: int | None = None
    positions: Mapping[str, str] | None = None

    KINDS = ("oldest", "upcoming", "timestamp", "specific")

    def __str__(self) -> str:
        text = f"{STARTPOINT_PREFIX}{self.kind}:{self.created_ms}"
        if self.kind == "timestamp":
            return f"{text}:{self.timestamp_ms}"
        if self.kind == "specific":
            assert self.positions is not None
            return f"{text}:" + ",".join(f"{shard}:{self.positions[shard]}" for shard in sorted(self.positions))
        return text

    @property
    def identity(self) -> str:
        """A key-safe name of this startpoint: kind, creation time and a digest of its value."""
        import hashlib

        return f"{self.kind}-{self.created_ms}-{hashlib.sha256(str(self).encode()).hexdigest()[:12]}"

    @classmethod
    def parse(cls, text: str) -> StartpointMarker:
        if not text.startswith(STARTPOINT_PREFIX):
            raise ValueError("it is not a startpoint marker")
        kind, _, rest = text[len(STARTPOINT_PREFIX) :].partition(":")
        created, _, value = rest.partition(":")
        if kind not in cls.KINDS or not created.isdigit():
            raise ValueError(f"'{text}' is not startpoint:<kind>:<created>[:<value>]")
        if kind == "timestamp":
            if not value.lstrip("-").isdigit():
                raise ValueError(f"timestamp startpoint '{text}' has no epoch-ms timestamp")
            return cls(kind, int(created), timestamp_ms=int(value))
        if kind == "specific":
            entries = parse_offset(value)
            return cls(kind, int(created), positions={s: e.sequence_number for s, e in entries.items()})
        return cls(kind, int(created))


def is_sentinel(offset: str) -> bool:
    """True for the offsets that name no record: ``TRIM_HORIZON``, ``LATEST``, ``AT_TIMESTAMP:<ms>``."""
    return offset in (TRIM_HORIZON, LATEST) or (
        offset.startswith(AT_TIMESTAMP_PREFIX) and offset[len(AT_TIMESTAMP_PREFIX) :].lstrip("-").isdigit()
    )

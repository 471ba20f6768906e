"""The nouns of a stream job, named as in Samza.

Envelopes are ``msgspec.Struct``s rather than Python classes: they are created once per message on the
hot path, and a struct's ``__init__`` runs in C, about twice as fast as a slotted Python ``__init__``.
They are also not tracked by the cyclic garbage collector (``gc=False``), so a batch of envelopes adds
nothing to the collector's work: an envelope refers to its partition, its offset and the message, never
back to anything that refers to it. They compare by identity (``eq=False``), as Samza's do.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import msgspec

from millstream.errors import MillstreamError

END_OF_STREAM_OFFSET = "\0END_OF_STREAM"
"""Offset of the synthetic envelope a consumer emits when a bounded partition has no more data."""


class Partition(NamedTuple):
    """A partition number of a stream."""

    partition_id: int

    def __str__(self) -> str:
        return f"Partition [partition={self.partition_id}]"


class SystemStream(NamedTuple):
    """A stream within a system, e.g. ``log.page-views``."""

    system: str
    stream: str

    def __str__(self) -> str:
        return f"{self.system}.{self.stream}"

    def partition(self, partition_id: int) -> SystemStreamPartition:
        return SystemStreamPartition(self.system, self.stream, partition_id)

    @classmethod
    def parse(cls, text: str) -> SystemStream:
        """Parse ``system.stream``; the stream part may itself contain dots (Kafka topics do)."""
        system, sep, stream = text.strip().partition(".")
        if not sep or not system or not stream:
            raise MillstreamError(f"'{text}' is not a stream name of the form system.stream")
        return cls(system, stream)


class SystemStreamPartition(NamedTuple):
    """One partition of one stream: the unit of consumption, ordering and checkpointing."""

    system: str
    stream: str
    partition: int

    @property
    def system_stream(self) -> SystemStream:
        return SystemStream(self.system, self.stream)

    def __str__(self) -> str:
        return f"SystemStreamPartition [{self.system}, {self.stream}, {self.partition}]"

    def key(self) -> str:
        """The compact form used in checkpoints and metadata keys: ``system.stream.partition``."""
        return f"{self.system}.{self.stream}.{self.partition}"

    @classmethod
    def parse_key(cls, text: str) -> SystemStreamPartition:
        """Inverse of :meth:`key`; the partition is the last dotted part, the system the first."""
        head, sep, partition = text.rpartition(".")
        system, sep2, stream = head.partition(".")
        if not sep or not sep2 or not partition.isdigit() or not system or not stream:
            raise MillstreamError(f"'{text}' is not a partition of the form system.stream.N")
        return cls(system, stream, int(partition))


_TASK_SSP_NAME = re.compile(r"^SystemStreamPartition \[(?P<system>[^,]+), (?P<stream>.+), (?P<partition>\d+)\]$")


class TaskName(str):
    """The name of a task, e.g. ``Partition 3``; a ``str`` so it serializes and sorts naturally."""

    __slots__ = ()

    def sort_key(self) -> tuple[str, int, str]:
        """Orders ``Partition 2`` before ``Partition 10``."""
        prefix, _, number = self.rpartition(" ")
        digits = number.rstrip("]")
        return (prefix, int(digits), self) if digits.isdigit() else (str(self), -1, self)


class IncomingMessageEnvelope(msgspec.Struct, gc=False, eq=False):
    """A message read from a system partition.

    Consumers fill ``key`` and ``message`` with bytes; the runtime replaces them in place with the
    objects the stream's serdes decode, so that a serde error can name the partition and offset and
    a bytes-only pipeline allocates nothing extra.
    """

    ssp: SystemStreamPartition
    offset: str
    key: Any
    message: Any
    timestamp: int = 0
    headers: dict[str, bytes] | None = None
    size: int = 0
    raw: tuple[Any, Any] | None = None
    """The key and message bytes as read, kept only where a failure policy needs them after decoding."""

    @property
    def system_stream_partition(self) -> SystemStreamPartition:
        return self.ssp

    @property
    def is_end_of_stream(self) -> bool:
        return self.offset == END_OF_STREAM_OFFSET

    @classmethod
    def end_of_stream(cls, ssp: SystemStreamPartition) -> IncomingMessageEnvelope:
        return cls(ssp, END_OF_STREAM_OFFSET, None, None)

    def __repr__(self) -> str:
        return (
            f"IncomingMessageEnvelope(ssp={self.ssp.key()}, offset={self.offset!r}, key={self.key!r}, "
            f"message={self.message!r}, timestamp={self.timestamp})"
        )


class _OutgoingFields(msgspec.Struct, gc=False, eq=False):
    """The positional fields of ``OutgoingMessageEnvelope``; its own fields are keyword-only."""

    system_stream: SystemStream
    message: Any
    key: Any = None
    partition_key: Any = None


class OutgoingMessageEnvelope(_OutgoingFields, kw_only=True, gc=False, eq=False):
    """A message a task sends; the producer serializes it with the stream's serdes.

    ``partition_key`` chooses the partition when given (else ``key``); ``partition`` pins it outright.
    """

    partition: int | None = None
    timestamp: int | None = None
    headers: dict[str, bytes] | None = None

    def __repr__(self) -> str:
        return (
            f"OutgoingMessageEnvelope({self.system_stream}, key={self.key!r}, message={self.message!r}, "
            f"partition={self.partition})"
        )

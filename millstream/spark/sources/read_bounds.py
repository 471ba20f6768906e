"""Where a DataFrame read of a stream starts and ends, from the options Spark users know.

Every bound is a startpoint, resolved per partition by the system's own admin
(``SystemAdmin.resolve_startpoint``), so offsets, timestamps and the words ``earliest`` / ``latest``
mean the same for every system, and for the streaming source that reuses these bounds:

* ``startingOffsets`` / ``endingOffsets``: ``"earliest"``, ``"latest"`` or JSON per partition as Spark's
  Kafka source takes it, ``{"0": 10, "1": -2}``, with ``-2`` the earliest and ``-1`` the latest offset
  (offsets in a system's own format, e.g. Kinesis sequence numbers, as JSON strings);
* ``startingTimestamp`` / ``endingTimestamp``: epoch ms (or ISO 8601), the first record at or after it;
* ``from``: ``millstream startpoint set``'s choices in one word — ``oldest``, ``upcoming``,
  ``timestamp:<ms or ISO 8601>`` or ``offset:<partition>=<offset>,...``.

A start is inclusive. An end is exclusive, except ``latest`` (the default): the newest record present
when the read is planned, inclusive.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from millstream.contracts.startpoints import (
    Startpoint,
    StartpointOldest,
    StartpointSpecific,
    StartpointTimestamp,
    StartpointUpcoming,
)
from millstream.errors import MillstreamError
from millstream.model import SystemStream
from millstream.startpoint.errors import StartpointError
from millstream.startpoint.tools import parse_timestamp

EARLIEST_WORDS = frozenset({"earliest", "oldest"})
LATEST_WORDS = frozenset({"latest", "upcoming", "newest"})
SPARK_OFFSET_WORDS = {-2: "earliest", -1: "latest"}
"""Spark's Kafka source writes the earliest offset as -2 and the latest as -1 in its JSON."""


class StreamReadError(MillstreamError):
    """A DataFrame read of a stream cannot be planned or completed; the message names stream and partition."""


@dataclass(frozen=True)
class ReadBounds:
    """Start and end of a read: a default for every partition, and per-partition ones from the options.

    ``StartpointUpcoming`` as an end means the newest record present at planning, inclusive."""

    start: Startpoint = field(default_factory=StartpointOldest)
    starts: Mapping[int, Startpoint] = field(default_factory=dict)
    end: Startpoint = field(default_factory=StartpointUpcoming)
    ends: Mapping[int, Startpoint] = field(default_factory=dict)
    start_option: str = "startingOffsets"
    end_option: str = "endingOffsets"

    def start_of(self, partition: int) -> Startpoint:
        return self.starts.get(partition, self.start)

    def end_of(self, partition: int) -> Startpoint:
        return self.ends.get(partition, self.end)

    def check_partitions(self, stream: SystemStream | str, partitions: set[int]) -> None:
        """Refuse bounds naming a partition the stream does not have, naming the option and the partitions."""
        for option, given in ((self.start_option, self.starts), (self.end_option, self.ends)):
            unknown = sorted(set(given) - partitions)
            if unknown:
                raise StreamReadError(
                    f"option '{option}' names partition(s) {unknown} of stream '{stream}', "
                    f"which has partitions {sorted(partitions)}"
                )


def parse_bounds(options: Mapping[str, str]) -> ReadBounds:
    """The bounds the options give (keys lower case, as Spark hands them); at most one way to give each end."""
    starting = {
        name: options[name.lower()]
        for name in ("startingOffsets", "startingTimestamp", "from")
        if name.lower() in options
    }
    ending = {name: options[name.lower()] for name in ("endingOffsets", "endingTimestamp") if name.lower() in options}
    for given in (starting, ending):
        if len(given) > 1:
            raise StreamReadError(f"options {sorted(given)} both give where the read starts or ends: give one")
    start, starts, start_option = _bound(*next(iter(starting.items()), ("startingOffsets", "earliest")))
    end, ends, end_option = _bound(*next(iter(ending.items()), ("endingOffsets", "latest")))
    return ReadBounds(start, starts, end, ends, start_option, end_option)


def _bound(option: str, text: str) -> tuple[Startpoint, dict[int, Startpoint], str]:
    if option.endswith("Timestamp"):
        return StartpointTimestamp(_timestamp(option, text)), {}, option
    if option == "from":
        return (*parse_from(text), option)
    word = text.strip().lower()
    if word in EARLIEST_WORDS | LATEST_WORDS:
        return _word(word), {}, option
    default = StartpointOldest() if option.startswith("starting") else StartpointUpcoming()
    return default, parse_offsets(text, option), option


def parse_offsets(text: str | None, option: str) -> dict[int, Startpoint]:
    """``{"0": 5, "1": -2, "2": "latest"}`` → a startpoint per partition, with an error naming the option."""
    if not text:
        return {}
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise StreamReadError(f"option '{option}' is not JSON ({error}): {text!r}") from None
    if not isinstance(parsed, dict) or not all(isinstance(key, str) and key.isdigit() for key in parsed):
        raise StreamReadError(
            f"option '{option}' must be 'earliest', 'latest' or JSON mapping partition numbers to offsets, "
            f'e.g. {{"0": 5, "1": -2}}, not {text!r}'
        )
    return {int(key): _offset(option, key, value) for key, value in parsed.items()}


def _offset(option: str, partition: str, value: object) -> Startpoint:
    if isinstance(value, int) and not isinstance(value, bool):
        return _word(SPARK_OFFSET_WORDS[value]) if value in SPARK_OFFSET_WORDS else StartpointSpecific(str(value))
    if isinstance(value, str) and value:
        word = value.strip().lower()
        return _word(word) if word in EARLIEST_WORDS | LATEST_WORDS else StartpointSpecific(value)
    raise StreamReadError(
        f"option '{option}', partition {partition}: {value!r} is not an offset (an integer, -2, -1, or a string)"
    )


def _word(word: str) -> Startpoint:
    return StartpointOldest() if word in EARLIEST_WORDS else StartpointUpcoming()


def _timestamp(option: str, text: str) -> int:
    try:
        return parse_timestamp(text)
    except StartpointError as error:
        raise StreamReadError(f"option '{option}': {error}") from None


def parse_from(text: str) -> tuple[Startpoint, dict[int, Startpoint]]:
    """``from``: ``oldest``, ``upcoming``, ``timestamp:<ms or ISO 8601>`` or ``offset:<p>=<o>,...`` (the
    partitions not named start at the oldest record), the choices of ``millstream startpoint set``."""
    kind, _, value = text.strip().partition(":")
    kind = kind.lower()
    if kind in EARLIEST_WORDS | LATEST_WORDS and not value:
        return _word(kind), {}
    if kind == "timestamp" and value:
        return StartpointTimestamp(_timestamp("from", value)), {}
    if kind == "offset" and value:
        starts: dict[int, Startpoint] = {}
        for entry in value.split(","):
            partition, equals, offset = entry.strip().partition("=")
            if not (partition.strip().isdigit() and equals and offset.strip()):
                raise StreamReadError(f"option 'from': {entry!r} is not <partition>=<offset> (in {text!r})")
            starts[int(partition)] = StartpointSpecific(offset.strip())
        return StartpointOldest(), starts
    raise StreamReadError(
        f"option 'from' is oldest, upcoming, timestamp:<epoch ms or ISO 8601> or offset:<partition>=<offset>,..., "
        f"not {text!r}"
    )

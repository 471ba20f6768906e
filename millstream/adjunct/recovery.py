"""What an adjunct store does at start: the recovery table of SEP-4, and how a store is judged valid.

=========================  ======================  ========================  ==========================
persistent store           no store found          found, not valid          found and valid
=========================  ======================  ========================  ==========================
input marked bootstrap     create, from oldest     re-create, from oldest    continue from its offsets
input not bootstrap        create, from last       re-create, from last      continue from its offsets
=========================  ======================  ========================  ==========================

A non-persistent (in-memory) store is always new: from the oldest offset when its input is marked
bootstrap, else from the last offset. "Last offset" is where the store's previous incarnation had got
to, wherever it ran (recorded in the metadata store at every commit), else the stream's
``offset.default``. A store is valid when it recorded offsets for exactly its partitions, every one of
them is still in the stream (not trimmed by retention), and it committed within
``stores.<s>.adstore.max.age.ms``.
"""

from __future__ import annotations

import enum
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import orjson

from millstream.checkpoint.offset_manager import offsets_after
from millstream.contracts.systems import SystemAdmin, SystemStreamPartitionMetadata
from millstream.errors import MillstreamError
from millstream.model import SystemStreamPartition
from millstream.storage.layout import write_file_atomically

OFFSETS_FILE = "ADSTORE-OFFSETS"


class Found(enum.Enum):
    ABSENT = "no store found"
    INVALID = "store found but not valid"
    VALID = "store found and valid"


Start = Literal["recorded", "oldest", "last"]


@dataclass(frozen=True)
class Decision:
    recreate: bool
    start: Start
    """``recorded``: after the store's own offsets; ``oldest``: a full bootstrap; ``last``: after the
    last offset the job recorded for the store, else the stream's default."""


def decide(persistent: bool, bootstrap: bool, found: Found) -> Decision:
    if not persistent:
        return Decision(True, "oldest" if bootstrap else "last")
    if found is Found.VALID:
        return Decision(False, "recorded")
    return Decision(found is Found.INVALID, "oldest" if bootstrap else "last")


Position = tuple[Literal["last", "next"], str]
"""Where a partition's reading stands: after the ``last`` offset stored, or at the ``next`` offset to read
(a partition that delivered nothing since the store's start)."""


@dataclass(frozen=True)
class RecordedOffsets:
    """What a store recorded at its last commit (beside its data, or in the metadata store)."""

    positions: dict[SystemStreamPartition, Position]
    committed_ms: int
    version: str | None = None
    """The version a versioned store served (for ``millstream job status``)."""

    def to_bytes(self) -> bytes:
        positions = {ssp.key(): list(position) for ssp, position in sorted(self.positions.items())}
        document: dict[str, object] = {"positions": positions, "committed_ms": self.committed_ms}
        if self.version is not None:
            document["version"] = self.version
        return orjson.dumps(document)

    @classmethod
    def from_bytes(cls, data: bytes) -> RecordedOffsets | None:
        """None for anything unreadable: the store is then not valid, and nothing is resumed from it."""
        try:
            document = orjson.loads(data)
            positions: dict[SystemStreamPartition, Position] = {}
            for key, (kind, offset) in document["positions"].items():
                if kind not in ("last", "next"):
                    return None
                positions[SystemStreamPartition.parse_key(key)] = (kind, str(offset))
            version = document.get("version")
            return cls(positions, int(document["committed_ms"]), None if version is None else str(version))
        except (ValueError, KeyError, TypeError, AttributeError, MillstreamError):
            return None


def resume_offsets(
    positions: Mapping[SystemStreamPartition, Position], admins: Mapping[str, SystemAdmin]
) -> dict[SystemStreamPartition, str]:
    """The next offset to read of every recorded partition."""
    resume = {ssp: offset for ssp, (kind, offset) in positions.items() if kind == "next"}
    resume.update(offsets_after(admins, {ssp: offset for ssp, (kind, offset) in positions.items() if kind == "last"}))
    return resume


def write_recorded_offsets(directory: Path, positions: Mapping[SystemStreamPartition, Position]) -> None:
    body = RecordedOffsets(dict(positions), int(time.time() * 1000)).to_bytes()
    directory.mkdir(parents=True, exist_ok=True)
    write_file_atomically(directory / OFFSETS_FILE, b"%08x\n" % zlib.crc32(body) + body)


def read_recorded_offsets(directory: Path) -> RecordedOffsets | None:
    """None when absent, torn or corrupt (its checksum does not match)."""
    try:
        data = (directory / OFFSETS_FILE).read_bytes()
    except OSError:
        return None
    checksum, _, body = data.partition(b"\n")
    try:
        if int(checksum, 16) != zlib.crc32(body):
            return None
    except ValueError:
        return None
    return RecordedOffsets.from_bytes(body)


def check_validity(
    recorded: RecordedOffsets | None,
    resume: Mapping[SystemStreamPartition, str],
    ssps: frozenset[SystemStreamPartition],
    metadata: Mapping[SystemStreamPartition, SystemStreamPartitionMetadata],
    admins: Mapping[str, SystemAdmin],
    max_age_ms: int,
    now_ms: int | None = None,
) -> tuple[Found, str]:
    """Whether a store found on disk may be continued from ``resume``, and why not."""
    if recorded is None:
        return Found.INVALID, "it recorded no readable offsets"
    if set(recorded.positions) != set(ssps):
        had = sorted(ssp.key() for ssp in recorded.positions)
        want = sorted(ssp.key() for ssp in ssps)
        return Found.INVALID, f"it holds partitions {had}, the job now gives it {want}"
    for ssp, offset in sorted(resume.items()):
        partition = metadata[ssp]
        compare = admins[ssp.system].offset_comparator
        oldest = partition.oldest_offset or partition.upcoming_offset
        if (compare(offset, oldest) or 0) < 0:
            return Found.INVALID, f"{ssp.key()} no longer holds offset {offset} (its oldest is {oldest})"
        if (compare(offset, partition.upcoming_offset) or 0) > 0:
            return Found.INVALID, (
                f"it read {ssp.key()} up to {offset}, beyond the partition's end {partition.upcoming_offset} "
                "(was the stream re-created?)"
            )
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if max_age_ms >= 0 and now - recorded.committed_ms > max_age_ms:
        age_s = (now - recorded.committed_ms) / 1000
        return Found.INVALID, f"it last committed {age_s:.0f}s ago, more than adstore.max.age.ms={max_age_ms}"
    return Found.VALID, "valid"

"""Checkpoint formats, as Samza writes them, and the rules for choosing which one to resume from.

* ``CheckpointV1``: input offsets, and (for changelog stores) ``changelog SSP → "<checkpointId>:<offset>"``.
* ``CheckpointV2``: a ``CheckpointId``, the input offsets only, and state checkpoint markers per state
  backend per store (an opaque string each backend defines: a changelog offset, a snapshot index blob id).

A checkpoint manager stores each version under its own name (``CHECKPOINT_TYPES``: the Kafka checkpoint
topic's key ``type``) and (de)serializes it with ``CHECKPOINT_SERDES[version]``; which versions a job
writes and reads is configuration (``task.checkpoint.write.versions`` / ``read.versions``), and
:func:`select_checkpoint` is the one rule every manager applies when several versions exist.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

import orjson

from millstream.errors import MillstreamError
from millstream.model import SystemStreamPartition


class CheckpointFormatError(MillstreamError):
    """A stored checkpoint could not be read; the message names the task."""


@dataclass(frozen=True, order=True)
class CheckpointId:
    """``<millis>-<seq>``: when a commit started, and a sequence part that orders ids of one millisecond.

    Ordered by millis, then seq. Ids created by one process are strictly increasing even when the wall
    clock stands still or steps back within a millisecond, so a store's checkpoint directories
    (``<store dir>-<CheckpointId>``) sort in commit order.
    """

    millis: int
    seq: int

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _last: ClassVar[tuple[int, int]] = (0, 0)

    def __str__(self) -> str:
        return f"{self.millis}-{self.seq}"

    @classmethod
    def create(cls, now_ms: int | None = None) -> CheckpointId:
        millis = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        seq = time.monotonic_ns() % 1_000_000
        with cls._lock:
            if (millis, seq) <= cls._last:
                millis, seq = cls._last[0], cls._last[1] + 1
                if seq >= 1_000_000:
                    millis, seq = millis + 1, 0
            cls._last = (millis, seq)
        return cls(millis, seq)

    @classmethod
    def parse(cls, text: str) -> CheckpointId:
        millis, sep, seq = (text or "").strip().partition("-")
        if not sep or not millis.isdigit() or not seq.isdigit():
            raise CheckpointFormatError(f"'{text}' is not a CheckpointId (<millis>-<seq>)")
        return cls(int(millis), int(seq))


@dataclass(frozen=True)
class CheckpointV1:
    """The input offsets a task has processed up to (inclusive), and changelog SSPs' ``id:offset``."""

    offsets: Mapping[SystemStreamPartition, str | None] = field(default_factory=dict)
    version: int = 1

    def to_bytes(self) -> bytes:
        """``{"SystemStreamPartition [s, st, 0]": {"system", "stream", "partition", "offset"}}`` as Samza."""
        document = {
            str(ssp): {"system": ssp.system, "stream": ssp.stream, "partition": str(ssp.partition), "offset": offset}
            for ssp, offset in sorted(self.offsets.items())
        }
        return orjson.dumps(document)

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "checkpoint") -> CheckpointV1:
        """Read Samza's V1 document; the outer keys are ignored as Samza ignores them."""
        try:
            document = orjson.loads(data)
            offsets = {
                SystemStreamPartition(entry["system"], entry["stream"], int(entry["partition"])): entry.get("offset")
                for entry in document.values()
            }
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as error:
            raise CheckpointFormatError(f"{where}: not a valid V1 checkpoint: {error}") from None
        return cls(offsets)


@dataclass(frozen=True)
class CheckpointV2:
    """A commit's id, its input offsets, and ``backend name → store → state checkpoint marker``.

    The markers name the exact state each store had at this commit, which is what lets a restore
    reproduce it (transactional state). Both maps are read-only views.
    """

    checkpoint_id: CheckpointId
    input_offsets: Mapping[SystemStreamPartition, str | None] = field(default_factory=dict)
    state_checkpoint_markers: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    version: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_offsets", MappingProxyType(dict(self.input_offsets)))
        frozen = {backend: MappingProxyType(dict(stores)) for backend, stores in self.state_checkpoint_markers.items()}
        object.__setattr__(self, "state_checkpoint_markers", MappingProxyType(frozen))

    @property
    def offsets(self) -> Mapping[SystemStreamPartition, str | None]:
        """The input offsets (Samza's ``getOffsets``): what every reader of checkpoints needs."""
        return self.input_offsets

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CheckpointV2):
            return NotImplemented
        return (
            self.checkpoint_id == other.checkpoint_id
            and dict(self.input_offsets) == dict(other.input_offsets)
            and {k: dict(v) for k, v in self.state_checkpoint_markers.items()}
            == {k: dict(v) for k, v in other.state_checkpoint_markers.items()}
        )

    def __hash__(self) -> int:
        return hash(self.checkpoint_id)

    def to_bytes(self) -> bytes:
        return CheckpointV2Serde().to_bytes(self)

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "checkpoint") -> CheckpointV2:
        return CheckpointV2Serde().from_bytes(data, where)


Checkpoint = CheckpointV1 | CheckpointV2
"""Any checkpoint a manager reads or writes; ``.offsets`` are the input offsets of either."""


class CheckpointSerde(Protocol):
    version: int

    def to_bytes(self, checkpoint: Any) -> bytes: ...

    def from_bytes(self, data: bytes, where: str = "checkpoint") -> Checkpoint: ...


class CheckpointV1Serde:
    version = 1

    def to_bytes(self, checkpoint: Any) -> bytes:
        if not isinstance(checkpoint, CheckpointV1):
            raise TypeError(f"CheckpointV1Serde cannot write {type(checkpoint).__name__}")
        return checkpoint.to_bytes()

    def from_bytes(self, data: bytes, where: str = "checkpoint") -> CheckpointV1:
        return CheckpointV1.from_bytes(data, where)


class CheckpointV2Serde:
    """Samza's ``CheckpointV2Serde``: ``{"checkpoint-id", "input-offsets", "state-checkpoint-markers"}``.

    Input offsets are keyed ``system.stream.partition``; unknown fields are ignored on read.
    """

    version = 2

    def to_bytes(self, checkpoint: Any) -> bytes:
        if not isinstance(checkpoint, CheckpointV2):
            raise TypeError(f"CheckpointV2Serde cannot write {type(checkpoint).__name__}")
        document = {
            "checkpoint-id": str(checkpoint.checkpoint_id),
            "input-offsets": {ssp.key(): offset for ssp, offset in sorted(checkpoint.input_offsets.items())},
            "state-checkpoint-markers": {
                backend: dict(sorted(stores.items()))
                for backend, stores in sorted(checkpoint.state_checkpoint_markers.items())
            },
        }
        return orjson.dumps(document)

    def from_bytes(self, data: bytes, where: str = "checkpoint") -> CheckpointV2:
        try:
            document = orjson.loads(data)
            if not isinstance(document, dict):
                raise TypeError("not a JSON object")
            checkpoint_id = CheckpointId.parse(document["checkpoint-id"])
            offsets = document.get("input-offsets") or {}
            markers = document.get("state-checkpoint-markers") or {}
            if not isinstance(offsets, dict) or not isinstance(markers, dict):
                raise TypeError("input-offsets and state-checkpoint-markers must be objects")
            input_offsets = {}
            for key, offset in offsets.items():
                if offset is not None and not isinstance(offset, str):
                    raise TypeError(f"offset of {key} is not a string")
                input_offsets[SystemStreamPartition.parse_key(key)] = offset
            state: dict[str, dict[str, str]] = {}
            for backend, stores in markers.items():
                if not isinstance(stores, dict) or not all(isinstance(v, str) for v in stores.values()):
                    raise TypeError(f"markers of backend '{backend}' must map store names to strings")
                state[backend] = dict(stores)
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError, MillstreamError) as error:
            raise CheckpointFormatError(f"{where}: not a valid V2 checkpoint: {error}") from None
        return CheckpointV2(checkpoint_id, input_offsets, state)


CHECKPOINT_SERDES: Mapping[int, CheckpointSerde] = MappingProxyType({1: CheckpointV1Serde(), 2: CheckpointV2Serde()})
"""The serde of each checkpoint version."""

CHECKPOINT_TYPES: Mapping[int, str] = MappingProxyType({1: "checkpoint", 2: "checkpoint-v2"})
"""Each version's record type (the ``type`` of Samza's checkpoint topic key)."""


def serialize_checkpoint(checkpoint: Checkpoint) -> bytes:
    return CHECKPOINT_SERDES[checkpoint.version].to_bytes(checkpoint)


def deserialize_checkpoint(version: int, data: bytes, where: str = "checkpoint") -> Checkpoint:
    serde = CHECKPOINT_SERDES.get(version)
    if serde is None:
        raise CheckpointFormatError(f"{where}: unknown checkpoint version {version}")
    return serde.from_bytes(data, where)


def version_of_type(record_type: str) -> int | None:
    """The version a checkpoint record type designates; None for a type this millstream does not know."""
    for version, name in CHECKPOINT_TYPES.items():
        if name == record_type:
            return version
    return None


def select_checkpoint(
    candidates: Sequence[tuple[Checkpoint, int]], read_versions: Sequence[int], max_age_ms: int
) -> Checkpoint | None:
    """The checkpoint to resume from among ``(checkpoint, written at ms)`` in the order they were written.

    Samza's rule, applied as a scan: a candidate of a version not in ``read_versions`` is ignored; the
    next one replaces the current choice when there is none, when its version has the same or a higher
    priority (earlier in ``read_versions``), or when it was written more than ``max_age_ms`` after the
    current choice — so a stale preferred version (a V2 left behind by a rollback to V1) loses to a
    live one of lower priority.
    """
    if not read_versions:
        raise ValueError("read_versions must name at least one checkpoint version")
    priority = {version: index for index, version in enumerate(read_versions)}
    chosen: tuple[Checkpoint, int] | None = None
    for checkpoint, written in candidates:
        rank = priority.get(checkpoint.version)
        if rank is None:
            continue
        if chosen is None or rank <= priority[chosen[0].version] or written - chosen[1] > max_age_ms:
            chosen = (checkpoint, written)
    return None if chosen is None else chosen[0]

"""Checkpoint formats. V1 is Samza's: a map of SSP to offset, serialized as Samza writes it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from millstream.errors import MillstreamError
from millstream.model import SystemStreamPartition


class CheckpointFormatError(MillstreamError):
    """A stored checkpoint could not be read; the message names the task."""


@dataclass(frozen=True)
class CheckpointV1:
    """The input offsets a task has processed up to (inclusive)."""

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


Checkpoint = CheckpointV1
"""The checkpoint types a manager reads and writes; the state issue adds CheckpointV2."""

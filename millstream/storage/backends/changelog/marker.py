"""The changelog backend's state checkpoint marker, in Samza's ``KafkaStateCheckpointMarker`` JSON:
``{"version":1,"changelog-ssp":{"system","stream","partition","keyBucket":-1},"changelog-offset":"17"|null}``,
and its V1 form, ``changelog SSP → "<CheckpointId>:<offset>"`` (``"<id>:null"`` for an empty changelog)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from millstream.checkpoint.checkpoint import CheckpointFormatError, CheckpointId
from millstream.errors import MillstreamError
from millstream.model import SystemStreamPartition

MARKER_VERSION = 1


@dataclass(frozen=True)
class ChangelogStateCheckpointMarker:
    changelog_ssp: SystemStreamPartition
    changelog_offset: str | None

    def to_string(self) -> str:
        ssp = self.changelog_ssp
        document = {
            "version": MARKER_VERSION,
            "changelog-ssp": {"system": ssp.system, "stream": ssp.stream, "partition": ssp.partition, "keyBucket": -1},
            "changelog-offset": self.changelog_offset,
        }
        return orjson.dumps(document).decode()

    @classmethod
    def parse(cls, text: str, where: str = "changelog marker") -> ChangelogStateCheckpointMarker:
        try:
            document = orjson.loads(text)
            if document["version"] != MARKER_VERSION:
                raise ValueError(f"unsupported version {document['version']}")
            ssp = document["changelog-ssp"]
            offset = document.get("changelog-offset")
            if offset is not None and not isinstance(offset, str):
                raise TypeError("changelog-offset must be a string or null")
            return cls(SystemStreamPartition(ssp["system"], ssp["stream"], int(ssp["partition"])), offset)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise CheckpointFormatError(f"{where}: not a valid changelog state checkpoint marker: {error}") from None


def v1_entry(checkpoint_id: CheckpointId, offset: str | None) -> str:
    return f"{checkpoint_id}:{'null' if offset is None else offset}"


def parse_v1_entry(text: str | None, where: str = "changelog offset") -> tuple[CheckpointId | None, str | None]:
    """``"<id>:<offset>"`` → (id, offset); a bare offset (older writers) has no id; ``null`` is None."""
    if text is None:
        return None, None
    head, sep, offset = text.partition(":")
    if not sep:
        return None, None if text == "null" else text
    try:
        checkpoint_id = CheckpointId.parse(head)
    except MillstreamError:
        raise CheckpointFormatError(f"{where}: '{text}' is not '<CheckpointId>:<offset>'") from None
    return checkpoint_id, None if offset == "null" else offset

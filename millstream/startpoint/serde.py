"""Startpoints as JSON, in Samza's shape: ``{"@type": "StartpointSpecific", "creationTimestamp": …, …}``."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import orjson

from millstream.contracts.startpoints import (
    Startpoint,
    StartpointSpecific,
    StartpointTimestamp,
    startpoint_type,
    type_name,
)
from millstream.model import SystemStreamPartition
from millstream.startpoint.errors import StartpointFormatError

_FIELD_NAMES = {"specific_offset": "specificOffset", "timestamp_offset": "timestampOffset"}


def _camel(name: str) -> str:
    if name in _FIELD_NAMES:
        return _FIELD_NAMES[name]
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def startpoint_to_dict(startpoint: Startpoint) -> dict[str, Any]:
    document: dict[str, Any] = {"@type": type_name(startpoint), "creationTimestamp": startpoint.creation_timestamp}
    for item in dataclasses.fields(startpoint):
        if item.name != "creation_timestamp":
            document[_camel(item.name)] = getattr(startpoint, item.name)
    return document


def startpoint_from_dict(document: Mapping[str, Any], where: str = "startpoint") -> Startpoint:
    try:
        name = document["@type"]
        cls = startpoint_type(name)
        if cls is None:
            raise StartpointFormatError(f"{where}: unknown startpoint type '{name}' (register it first)")
        fields = {_snake(k): v for k, v in document.items() if k not in ("@type", "creationTimestamp")}
        if cls is StartpointSpecific:
            fields["specific_offset"] = str(fields["specific_offset"])
        if cls is StartpointTimestamp:
            fields["timestamp_offset"] = int(fields["timestamp_offset"])
        return cls(**fields, creation_timestamp=int(document["creationTimestamp"]))
    except StartpointFormatError:
        raise
    except (KeyError, TypeError, ValueError) as error:
        raise StartpointFormatError(f"{where}: not a valid startpoint: {error!r}") from None


def startpoint_to_bytes(startpoint: Startpoint) -> bytes:
    return orjson.dumps(startpoint_to_dict(startpoint))


def startpoint_from_bytes(data: bytes, where: str = "startpoint") -> Startpoint:
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise StartpointFormatError(f"{where}: not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise StartpointFormatError(f"{where}: expected a JSON object")
    return startpoint_from_dict(document, where)


def fan_out_to_bytes(timestamp: int, fan_outs: Mapping[SystemStreamPartition, Startpoint]) -> bytes:
    """Samza's ``StartpointFanOutPerTask``: ``{"timestamp": …, "fanOuts": {"sys.stream.p": {…}}}``."""
    return orjson.dumps(
        {"timestamp": timestamp, "fanOuts": {ssp.key(): startpoint_to_dict(sp) for ssp, sp in sorted(fan_outs.items())}}
    )


def fan_out_from_bytes(data: bytes, where: str) -> tuple[int, dict[SystemStreamPartition, Startpoint]]:
    try:
        document = orjson.loads(data)
        fan_outs = {
            SystemStreamPartition.parse_key(key): startpoint_from_dict(value, f"{where} {key}")
            for key, value in document["fanOuts"].items()
        }
        return int(document["timestamp"]), fan_outs
    except StartpointFormatError:
        raise
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as error:
        raise StartpointFormatError(f"{where}: not a valid fan-out record: {error!r}") from None

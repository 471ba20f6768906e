"""The wire format of intermediate streams: ``[type byte][payload]`` (Samza's IntermediateMessageSerde).

Type 0 is a user message whose payload the user's serde wrote; types 1 (watermark), 2 (end-of-stream)
and 3 (drain) carry a JSON control message ``{"version", "taskName", "taskCount"[, "timestamp"][,
"runId"]}``; type 4 (a container's combined watermark, ours, not Samza's) ``{"version", "taskNames",
"taskCount", "timestamp"}``. JSON keeps control messages readable with ``millstream streams consume`` and decodable by
any language; Samza's ``task-name`` / ``task-count`` / ``run-id`` spellings are accepted on read.

A type byte above the known ones is a newer producer's control message: ``unframe`` raises
``UnknownMessageTypeError`` for the consumer to skip it, so versions can be rolled one job at a time.
An empty record is never a message of any version and fails.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import orjson

from millstream.control.errors import FramingError, UnknownMessageTypeError
from millstream.control.messages import (
    CombinedWatermarkMessage,
    ControlMessage,
    DrainMessage,
    EndOfStreamMessage,
    WatermarkMessage,
)


class MessageType(IntEnum):
    """The type byte; 0-3 are Samza's ``MessageType`` ordinals."""

    USER_MESSAGE = 0
    WATERMARK = 1
    END_OF_STREAM = 2
    DRAIN = 3
    COMBINED_WATERMARK = 4
    """Not Samza's: one watermark for several producing tasks of one container (``combining``)."""


_USER_PREFIX = bytes([MessageType.USER_MESSAGE])
_WATERMARK_PREFIX = bytes([MessageType.WATERMARK])
_END_OF_STREAM_PREFIX = bytes([MessageType.END_OF_STREAM])
_DRAIN_PREFIX = bytes([MessageType.DRAIN])
_COMBINED_PREFIX = bytes([MessageType.COMBINED_WATERMARK])
_CONTROL_TYPES = (MessageType.WATERMARK, MessageType.END_OF_STREAM, MessageType.DRAIN, MessageType.COMBINED_WATERMARK)


def frame_user_message(payload: bytes) -> bytes:
    return _USER_PREFIX + payload


def frame_control_message(message: ControlMessage) -> bytes:
    if isinstance(message, CombinedWatermarkMessage):
        combined = {
            "version": message.version,
            "taskNames": list(message.task_names),
            "taskCount": message.task_count,
            "timestamp": message.timestamp,
        }
        return _COMBINED_PREFIX + orjson.dumps(combined)
    document: dict[str, Any] = {
        "version": message.version,
        "taskName": message.task_name,
        "taskCount": message.task_count,
    }
    if isinstance(message, WatermarkMessage):
        document["timestamp"] = message.timestamp
        return _WATERMARK_PREFIX + orjson.dumps(document)
    if isinstance(message, DrainMessage):
        document["runId"] = message.run_id
        return _DRAIN_PREFIX + orjson.dumps(document)
    return _END_OF_STREAM_PREFIX + orjson.dumps(document)


def unframe(data: Any, where: str = "") -> tuple[MessageType, bytes | ControlMessage]:
    """Split a record into its type and its payload: the user's bytes, or the decoded control message.

    ``where`` (stream, partition, offset) is put into the error of a record that is not framed; a type
    byte this version does not know raises ``UnknownMessageTypeError`` (the caller skips the record).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) == 0:
        shown = "an empty record" if isinstance(data, (bytes, bytearray, memoryview)) else type(data).__name__
        raise FramingError(f"{where or 'intermediate record'}: expected a framed message, got {shown}")
    kind = data[0]
    if kind == MessageType.USER_MESSAGE:
        return MessageType.USER_MESSAGE, bytes(data[1:])
    if kind not in _CONTROL_TYPES:
        raise UnknownMessageTypeError(f"{where or 'intermediate record'}: unknown message type byte {kind}", kind)
    return MessageType(kind), decode_control_message(MessageType(kind), bytes(data[1:]), where)


def decode_control_message(kind: MessageType, payload: bytes, where: str = "") -> ControlMessage:
    place = where or "intermediate record"
    try:
        document = orjson.loads(payload)
    except orjson.JSONDecodeError as error:
        raise FramingError(f"{place}: control message is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise FramingError(f"{place}: control message is not a JSON object")
    if kind == MessageType.COMBINED_WATERMARK:
        return _combined(document, place)
    task_name = _first(document, "taskName", "task-name")
    task_count = _first(document, "taskCount", "task-count")
    version = document.get("version", 1)
    if task_name is not None and not isinstance(task_name, str):
        raise FramingError(f"{place}: control message taskName must be a string, got {task_name!r}")
    if task_name is not None and (not isinstance(task_count, int) or task_count < 1):
        raise FramingError(
            f"{place}: control message from task '{task_name}' needs a positive taskCount, got {task_count!r}"
        )
    count = task_count if isinstance(task_count, int) else 0
    if not isinstance(version, int):
        raise FramingError(f"{place}: control message version must be an integer, got {version!r}")
    if kind == MessageType.END_OF_STREAM:
        return EndOfStreamMessage(task_name, count, version)
    if kind == MessageType.DRAIN:
        run_id = _first(document, "runId", "run-id")
        if not isinstance(run_id, str) or not run_id:
            raise FramingError(f"{place}: drain message needs a runId string, got {run_id!r}")
        return DrainMessage(task_name, count, run_id, version)
    timestamp = document.get("timestamp")
    if not isinstance(timestamp, int) or isinstance(timestamp, bool):
        raise FramingError(f"{place}: watermark message needs an integer timestamp, got {timestamp!r}")
    return WatermarkMessage(timestamp, task_name, count, version)


def _combined(document: dict[str, Any], place: str) -> CombinedWatermarkMessage:
    names, count = document.get("taskNames"), document.get("taskCount")
    version, timestamp = document.get("version", 1), document.get("timestamp")
    if not isinstance(names, list) or not names or not all(isinstance(name, str) for name in names):
        raise FramingError(f"{place}: combined watermark needs a non-empty list of taskNames, got {names!r}")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise FramingError(f"{place}: combined watermark of tasks {names} needs a positive taskCount, got {count!r}")
    if not isinstance(version, int):
        raise FramingError(f"{place}: control message version must be an integer, got {version!r}")
    if not isinstance(timestamp, int) or isinstance(timestamp, bool):
        raise FramingError(f"{place}: combined watermark needs an integer timestamp, got {timestamp!r}")
    return CombinedWatermarkMessage(timestamp, tuple(names), count, version)


def _first(document: dict[str, Any], *names: str) -> Any:
    for name in names:
        if name in document:
            return document[name]
    return None

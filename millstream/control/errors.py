"""Errors of in-band control: each names the stream, partition, offset or task at fault."""

from __future__ import annotations

from millstream.errors import MillstreamError


class FramingError(MillstreamError):
    """An intermediate record is not a framed message; names where it was read."""


class ControlStateError(MillstreamError):
    """A persisted control state cannot be read; names the task or partition."""


class UnknownMessageTypeError(FramingError):
    """A record whose type byte this version does not know: a newer producer's control message.

    Skipped (with a warning and a count) rather than failing the container, so producers and consumers
    of different versions can be rolled one after the other."""

    def __init__(self, message: str, type_byte: int) -> None:
        super().__init__(message)
        self.type_byte = type_byte

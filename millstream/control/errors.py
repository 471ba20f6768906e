"""Errors of in-band control: each names the stream, partition, offset or task at fault."""

from __future__ import annotations

from millstream.errors import MillstreamError


class FramingError(MillstreamError):
    """An intermediate record is not a framed message; names where it was read."""


class ControlStateError(MillstreamError):
    """A persisted control state cannot be read; names the task or partition."""

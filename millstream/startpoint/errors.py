"""Errors of the startpoint package; each names the stream, partition or value at fault."""

from millstream.errors import MillstreamError


class StartpointError(MillstreamError):
    """A startpoint could not be written, read or applied."""


class StartpointFormatError(StartpointError):
    """A stored startpoint is not valid JSON of a known type."""


class StartpointManagerStoppedError(StartpointError):
    """The manager was used after ``stop()``."""

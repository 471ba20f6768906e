"""Errors of the high-level API: each names the operator or stream at fault."""

from __future__ import annotations

from millstream.errors import ConfigError


class ApplicationError(ConfigError):
    """An application describes a graph millstream cannot run; the job does not start (exit code 2)."""

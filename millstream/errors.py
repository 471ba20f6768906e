"""The root of every error millstream raises on purpose.

Each package defines its own subclasses next to the code that raises them; every one carries the
thing at fault (key, stream, partition, offset, file) in its message so an operator can act on it.
"""

SUPERSEDED_EXIT_CODE = 3
"""How ``millstream run`` and the spark-submit entry point exit when another run of the job took over."""
FORCED_STOP_EXIT_CODE = 130
"""A second Ctrl-C / SIGTERM: stopped without waiting for the final commits."""


class MillstreamError(Exception):
    """Base class of all millstream errors."""


class MessageError(MillstreamError):
    """A failure of one message's processing raised by millstream on the task's behalf (a remote table's call
    that failed for good): like the task's own exceptions, it goes to ``task.process.errors``, not straight
    to the container."""


class ConfigError(MillstreamError):
    """The job cannot start because its configuration is wrong; the CLI exits with code 2."""

    exit_code = 2


class StreamNotFoundError(MillstreamError):
    """A stream a job needs does not exist in its system."""

    exit_code = 2

    def __init__(self, system: str, stream: str, detail: str = "") -> None:
        self.system = system
        self.stream = stream
        suffix = f": {detail}" if detail else ""
        super().__init__(f"stream '{system}.{stream}' does not exist{suffix}")

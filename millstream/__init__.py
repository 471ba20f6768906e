"""millstream: Samza-style stream processing in Python, run on Apache Spark.

What a user imports to write a job; everything else is reached by its package path.
"""

from importlib.metadata import PackageNotFoundError, version

from millstream.api.application import (
    KV,
    InputDescriptor,
    OutputDescriptor,
    StreamApplication,
    StreamApplicationDescriptor,
)
from millstream.api.remote_table import AsyncTable, RemoteTable
from millstream.api.stream import MessageStream
from millstream.api.task import (
    AsyncStreamTask,
    BatchStreamTask,
    ClosableTask,
    DrainListenerTask,
    EndOfStreamListenerTask,
    InitableTask,
    MessageCollector,
    StreamTask,
    TaskContext,
    TaskCoordinator,
    WindowableTask,
)
from millstream.api.windows import SessionWindow, SlidingWindow, TumblingWindow, WindowPane
from millstream.errors import ConfigError, MillstreamError
from millstream.model import (
    IncomingMessageEnvelope,
    OutgoingMessageEnvelope,
    Partition,
    SystemStream,
    SystemStreamPartition,
    TaskName,
)
from millstream.table.errors import RemoteTableError, RetriableError

try:  # pyproject.toml is the one place the version is written; the installed metadata carries it here
    __version__ = version("millstream")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "KV",
    "AsyncStreamTask",
    "AsyncTable",
    "BatchStreamTask",
    "ClosableTask",
    "ConfigError",
    "DrainListenerTask",
    "EndOfStreamListenerTask",
    "IncomingMessageEnvelope",
    "InitableTask",
    "InputDescriptor",
    "MessageCollector",
    "MessageStream",
    "MillstreamError",
    "OutgoingMessageEnvelope",
    "OutputDescriptor",
    "Partition",
    "RemoteTable",
    "RemoteTableError",
    "RetriableError",
    "SessionWindow",
    "SlidingWindow",
    "StreamApplication",
    "StreamApplicationDescriptor",
    "StreamTask",
    "SystemStream",
    "SystemStreamPartition",
    "TaskContext",
    "TaskCoordinator",
    "TaskName",
    "TumblingWindow",
    "WindowPane",
    "WindowableTask",
]

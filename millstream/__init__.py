"""millstream: Samza-style stream processing in Python, run on Apache Spark.

What a user imports to write a job; everything else is reached by its package path.
"""

from millstream.api.task import (
    ClosableTask,
    EndOfStreamListenerTask,
    InitableTask,
    MessageCollector,
    StreamTask,
    TaskContext,
    TaskCoordinator,
    WindowableTask,
)
from millstream.errors import ConfigError, MillstreamError
from millstream.model import (
    IncomingMessageEnvelope,
    OutgoingMessageEnvelope,
    Partition,
    SystemStream,
    SystemStreamPartition,
    TaskName,
)

__version__ = "0.1.0"

__all__ = [
    "ClosableTask",
    "ConfigError",
    "EndOfStreamListenerTask",
    "IncomingMessageEnvelope",
    "InitableTask",
    "MessageCollector",
    "MillstreamError",
    "OutgoingMessageEnvelope",
    "Partition",
    "StreamTask",
    "SystemStream",
    "SystemStreamPartition",
    "TaskContext",
    "TaskCoordinator",
    "TaskName",
    "WindowableTask",
]
